use super::*;
use alloc::format;
use alloc::string::String;
use alloc::string::ToString;
use alloc::vec;

fn text(t: &TuneTable) -> String {
    let mut s = String::new();
    t.write(&mut s).unwrap();
    s
}

fn expect_err(src: &str, needle: &str) {
    match TuneTable::parse(src) {
        Err(Error::InvalidArgument { arg, expected }) => {
            assert_eq!(arg, "tune table");
            assert!(
                expected.as_str().contains(needle),
                "`{}` lacks `{needle}`",
                expected.as_str()
            );
        }
        other => panic!("{src:?}: expected an invalid-argument error, got {other:?}"),
    }
}

const SAMPLE: &str = "oxccl-tune 1
# a comment line
all_reduce * 0 65535 window   # a comment after an entry
all_reduce float32 65536 max registered
all_gather * 0 max 2
";

#[test]
fn collectives_are_all_kinds_but_p2p_and_barrier() {
    let excluded = [OpKind::Send, OpKind::Recv, OpKind::Barrier];
    let want: Vec<OpKind> = OpKind::ALL
        .into_iter()
        .filter(|k| !excluded.contains(k))
        .collect();
    assert_eq!(COLLECTIVES.as_slice(), want.as_slice());
    for k in excluded {
        let row = TuneRow {
            coll: Some(k),
            dtype: None,
            min_bytes: 0,
            max_bytes: u64::MAX,
            mode: RegMode::Plain,
        };
        assert!(TuneTable::new(vec![row]).is_err(), "{k} named in a row");
    }
}

#[test]
fn parses_rows_and_looks_up_first_match() {
    let t = TuneTable::parse(SAMPLE).unwrap();
    assert_eq!(t.rows().len(), 3);
    assert_eq!(
        t.rows()[1],
        TuneRow {
            coll: Some(OpKind::AllReduce),
            dtype: Some(DataType::Float32),
            min_bytes: 65536,
            max_bytes: u64::MAX,
            mode: RegMode::Registered,
        }
    );
    let f32 = DataType::Float32;
    assert_eq!(t.lookup(OpKind::AllReduce, f32, 8), RegMode::Window);
    assert_eq!(t.lookup(OpKind::AllReduce, f32, 65535), RegMode::Window);
    assert_eq!(t.lookup(OpKind::AllReduce, f32, 65536), RegMode::Registered);
    // No row for bfloat16 above 64 KiB: plain.
    assert_eq!(
        t.lookup(OpKind::AllReduce, DataType::Bfloat16, 1 << 27),
        RegMode::Plain
    );
    assert_eq!(t.lookup(OpKind::AllGather, f32, 1 << 27), RegMode::Window);
    assert_eq!(t.lookup(OpKind::Broadcast, f32, 8), RegMode::Plain);
    assert!(t.uses(RegMode::Window) && !t.uses(RegMode::Plain));
}

#[test]
fn writes_what_it_parses() {
    let t = TuneTable::parse(SAMPLE).unwrap();
    let s = text(&t);
    assert_eq!(
        s,
        "oxccl-tune 1\n# collective dtype min_bytes max_bytes mode\n\
         all_reduce * 0 65535 window\nall_reduce float32 65536 max registered\n\
         all_gather * 0 max window\n"
    );
    let back = TuneTable::parse(&s).unwrap();
    assert_eq!(back, t);
    assert_eq!(back.fingerprint(), t.fingerprint());
}

#[test]
fn fingerprints_differ_when_a_mode_does() {
    let a = TuneTable::uniform(RegMode::Plain);
    let b = TuneTable::uniform(RegMode::Window);
    assert_ne!(a.fingerprint(), b.fingerprint());
    // FNV-1a of a fixed text: the value is the same on every platform.
    assert_eq!(
        a.fingerprint(),
        TuneTable::uniform(RegMode::Plain).fingerprint()
    );
    assert_eq!(TuneTable::default().rows().len(), 0);
    assert_eq!(
        TuneTable::default().lookup(OpKind::AllReduce, DataType::Int8, 0),
        RegMode::Plain
    );
}

#[test]
fn bad_files_name_line_and_field() {
    expect_err("", "a first line `oxccl-tune 1`");
    expect_err("oxccl-tune 2\n", "line 1, field `header`");
    expect_err(
        "oxccl-tune 1\nall_reduce * 0 8\n",
        "line 2, field `mode`: 5 fields",
    );
    expect_err(
        "oxccl-tune 1\n\n# c\nallreduce * 0 8 plain\n",
        "line 4, field `collective`",
    );
    expect_err("oxccl-tune 1\nsend * 0 8 plain\n", "got `send`");
    expect_err("oxccl-tune 1\nall_reduce f32 0 8 plain\n", "field `dtype`");
    expect_err(
        "oxccl-tune 1\nall_reduce * -1 8 plain\n",
        "field `min_bytes`",
    );
    expect_err(
        "oxccl-tune 1\nall_reduce * 0 8k plain\n",
        "field `max_bytes`",
    );
    expect_err(
        "oxccl-tune 1\nall_reduce * 9 8 plain\n",
        "line 2, field `max_bytes`: at least min_bytes (9), got `8`",
    );
    expect_err("oxccl-tune 1\nall_reduce * 0 8 fast\n", "field `mode`");
    expect_err("oxccl-tune 1\nall_reduce * 0 8 plain x\n", "field `end`");
    expect_err("oxccl-tune 1\nall_reduce * 0 8 3\n", "got `3`");
}

#[test]
fn new_checks_rows() {
    let row = TuneRow {
        coll: Some(OpKind::Send),
        dtype: None,
        min_bytes: 0,
        max_bytes: 1,
        mode: RegMode::Plain,
    };
    assert!(matches!(
        TuneTable::new(vec![row]),
        Err(Error::InvalidArgument { arg: "rows", .. })
    ));
    let row = TuneRow {
        coll: None,
        min_bytes: 2,
        ..row
    };
    assert!(TuneTable::new(vec![row]).is_err());
    let ok = TuneRow {
        min_bytes: 1,
        ..row
    };
    assert_eq!(TuneTable::new(vec![ok]).unwrap().rows(), &[ok]);
}

#[test]
fn modes_parse_by_name_and_level() {
    for m in RegMode::ALL {
        assert_eq!(RegMode::parse(m.name()), Some(m));
        assert_eq!(RegMode::parse(&alloc::format!("{}", m.level())), Some(m));
    }
    assert_eq!(RegMode::parse("Window"), None);
}

#[test]
fn choose_falls_back_to_plain_for_plain_buffers() {
    let t = TuneTable::uniform(RegMode::Window);
    let f = DataType::Float32;
    assert_eq!(t.choose(OpKind::AllGather, f, 8, true), RegMode::Window);
    assert_eq!(t.choose(OpKind::AllGather, f, 8, false), RegMode::Plain);
}

#[test]
fn sends_and_receives_are_registered_never_windowed() {
    let f = DataType::Float32;
    let win = TuneTable::uniform(RegMode::Window);
    for k in [OpKind::Send, OpKind::Recv] {
        assert_eq!(win.choose(k, f, 8, true), RegMode::Registered);
        assert_eq!(win.choose(k, f, 8, false), RegMode::Plain);
    }
    // A row naming a collective does not cover them; the registered and plain rows pass.
    let named = TuneTable::parse("oxccl-tune 1\nall_reduce * 0 max window\n").unwrap();
    assert_eq!(named.choose(OpKind::Send, f, 8, true), RegMode::Plain);
    let reg = TuneTable::uniform(RegMode::Registered);
    assert_eq!(reg.choose(OpKind::Recv, f, 8, true), RegMode::Registered);
    assert_eq!(win.choose(OpKind::AllReduce, f, 8, true), RegMode::Window);
}

/// A small deterministic generator, so the property tests need no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_tables_round_trip_and_look_up_like_a_linear_scan() {
    let mut g = Lcg(9);
    for _ in 0..300 {
        let rows: alloc::vec::Vec<TuneRow> = (0..g.below(6))
            .map(|_| {
                let a = g.below(1 << 20);
                let b = a + g.below(1 << 20);
                TuneRow {
                    coll: (g.below(3) > 0)
                        .then(|| COLLECTIVES[g.below(COLLECTIVES.len() as u64) as usize]),
                    dtype: (g.below(2) > 0)
                        .then(|| DataType::ALL[g.below(DataType::ALL.len() as u64) as usize]),
                    min_bytes: a,
                    max_bytes: if g.below(4) == 0 { u64::MAX } else { b },
                    mode: RegMode::ALL[g.below(3) as usize],
                }
            })
            .collect();
        let t = TuneTable::new(rows.clone()).unwrap();
        let back = TuneTable::parse(&text(&t)).unwrap();
        assert_eq!(back, t);
        for _ in 0..20 {
            let k = COLLECTIVES[g.below(COLLECTIVES.len() as u64) as usize];
            let d = DataType::ALL[g.below(DataType::ALL.len() as u64) as usize];
            let bytes = g.below(1 << 21);
            let want = rows
                .iter()
                .find(|r| {
                    r.coll.is_none_or(|c| c == k)
                        && r.dtype.is_none_or(|x| x == d)
                        && r.min_bytes <= bytes
                        && bytes <= r.max_bytes
                })
                .map_or(RegMode::Plain, |r| r.mode);
            assert_eq!(t.lookup(k, d, bytes), want);
            assert_eq!(t.choose(k, d, bytes, true), want);
            assert_eq!(t.choose(k, d, bytes, false), RegMode::Plain);
            // A send or receive: the same row's mode, but never a window.
            let p2p = [OpKind::Send, OpKind::Recv][g.below(2) as usize];
            let got = t.choose(p2p, d, bytes, true);
            assert_ne!(got, RegMode::Window);
            assert_eq!(got, t.lookup(p2p, d, bytes).min(RegMode::Registered));
        }
    }
}

#[test]
fn junk_never_panics() {
    let mut g = Lcg(1);
    let words = [
        "oxccl-tune 1",
        "all_reduce",
        "*",
        "float32",
        "0",
        "max",
        "window",
        "#",
        "\n",
        " ",
        "18446744073709551616",
        "-",
        "é",
        "\u{0}",
        "plain",
        "2",
    ];
    for _ in 0..2000 {
        let mut s = String::new();
        for _ in 0..g.below(30) {
            s.push_str(words[g.below(words.len() as u64) as usize]);
            if g.below(3) == 0 {
                s.push(' ');
            }
        }
        // Either a table or a typed error naming the table: never a panic.
        match TuneTable::parse(&s) {
            Ok(t) => assert_eq!(TuneTable::parse(&text(&t)).unwrap(), t),
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "tune table"),
            Err(other) => panic!("{other:?}"),
        }
    }
}

#[test]
fn kernels_lines_set_the_kernels_limits_by_group_size() {
    let text = "oxccl-tune 1\nall_reduce * 0 max window\n# kernels ranks one two\nkernels 4 131072 262144\nkernels 2 0 0\n";
    let t = TuneTable::parse(text).unwrap();
    assert_eq!(t.rows().len(), 1);
    assert_eq!(
        t.kernels(),
        &[
            KernelRow {
                ranks: 4,
                one_shot_max: 131072,
                two_shot_max: 262144,
                ..KernelRow::default()
            },
            KernelRow {
                ranks: 2,
                ..KernelRow::default()
            },
        ]
    );
    let p = t.peer_table();
    let d = oxccl_core::peer_kernels::PeerTable::default();
    assert_eq!((p.one_shot_max[4], p.two_shot_max[4]), (131072, 262144));
    assert_eq!(
        (p.one_shot_max[2], p.two_shot_max[2]),
        (0, 0),
        "2 GPUs: NCCL only"
    );
    assert_eq!(
        p.one_shot_max[3], d.one_shot_max[3],
        "3 ranks keep the default"
    );
    // Written and read back alike; the fingerprint covers the kernels' rows.
    let again = TuneTable::parse(&t.to_string()).unwrap();
    assert_eq!(again, t);
    let plain = TuneTable::parse("oxccl-tune 1\nall_reduce * 0 max window\n").unwrap();
    assert_ne!(plain.fingerprint(), t.fingerprint());
    assert_eq!(plain.peer_table(), d);
}

#[test]
fn bad_kernels_lines_name_their_field() {
    for (line, field) in [
        ("kernels 4 1", "kernels"),
        ("kernels 1 8 8", "ranks"),
        ("kernels 9 8 8", "ranks"),
        ("kernels x 8 8", "ranks"),
        ("kernels 4 -1 8", "one_shot_max"),
        ("kernels 4 8 max", "two_shot_max"),
        ("kernels 4 8 8 16", "kernels"),
        ("kernels 4 8 8 x 16", "all_gather_max"),
        ("kernels 4 8 8 16 -2", "reduce_scatter_max"),
    ] {
        let e = TuneTable::parse(&format!("oxccl-tune 1\n{line}\n")).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&format!("field `{field}`")), "{line}: {text}");
    }
    let twice = TuneTable::parse("oxccl-tune 1\nkernels 4 8 8\nkernels 4 16 16\n").unwrap_err();
    assert!(
        twice
            .to_string()
            .contains("one `kernels` line per group size"),
        "{twice}"
    );
    let k = |ranks| KernelRow {
        ranks,
        one_shot_max: 1,
        two_shot_max: 2,
        ..KernelRow::default()
    };
    assert!(TuneTable::default().with_kernels(vec![k(2), k(8)]).is_ok());
    assert!(TuneTable::default().with_kernels(vec![k(1)]).is_err());
    assert!(TuneTable::default().with_kernels(vec![k(3), k(3)]).is_err());
}

#[test]
fn kernels_lines_may_set_the_gathers_limits_and_read_back_alike() {
    let text = "oxccl-tune 1\nkernels 2 1024 0 65536 32768\nkernels 4 131072 262144\n";
    let t = TuneTable::parse(text).unwrap();
    assert_eq!(
        t.kernels()[0],
        KernelRow {
            ranks: 2,
            one_shot_max: 1024,
            two_shot_max: 0,
            all_gather_max: 65536,
            reduce_scatter_max: 32768,
        }
    );
    assert_eq!(
        (
            t.kernels()[1].all_gather_max,
            t.kernels()[1].reduce_scatter_max
        ),
        (0, 0)
    );
    let p = t.peer_table();
    assert_eq!(
        (p.all_gather_max[2], p.reduce_scatter_max[2]),
        (65536, 32768)
    );
    assert_eq!((p.all_gather_max[4], p.reduce_scatter_max[4]), (0, 0));
    // Written with the gathers' fields on every row once one needs them, and read back equal.
    let written = t.to_string();
    assert!(
        written.contains("kernels 4 131072 262144 0 0\n"),
        "{written}"
    );
    assert_eq!(TuneTable::parse(&written).unwrap(), t);
    // A table of all-reduce limits alone keeps its short lines (and its fingerprint).
    let short = TuneTable::parse("oxccl-tune 1\nkernels 4 131072 262144\n").unwrap();
    assert!(short.to_string().contains("kernels 4 131072 262144\n"));
    assert!(!short.to_string().contains("all_gather_max"));
    assert_ne!(short.fingerprint(), t.fingerprint());
}
