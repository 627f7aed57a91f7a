use super::*;
use alloc::string::String;
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
# measured on two H200
all_reduce * 0 65535 window   # small: windows halve latency
all_reduce float32 65536 max registered
all_gather * 0 max 2
";

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
