//! A small encoder of Python's pickle format (protocol 2), for the flight-recorder dumps that
//! PyTorch's analyzer (`torchfrtrace`) reads with `pickle.load`.
//!
//! Only the plain data of a [`DumpValue`]: `None`, bools, ints of any size up to 128 bits, floats,
//! str, lists, tuples and dicts. No memo (every value is written out in full: dumps are trees, never graphs), so
//! the output is a pure function of the value.

use super::value::DumpValue;

// Opcodes of protocols 0–2 (Python's Lib/pickletools.py documents each).
const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const BINUNICODE: u8 = b'X';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const MARK: u8 = b'(';

// Python's own pickler batches APPENDS/SETITEMS by 1000 so the unpickler's stack stays small.
const BATCH: usize = 1000;

/// The pickle (protocol 2) of `value`: what `pickle.load` turns back into it.
pub fn to_pickle(value: &DumpValue) -> Vec<u8> {
    let mut out = vec![PROTO, 2];
    write(&mut out, value);
    out.push(STOP);
    out
}

fn write(out: &mut Vec<u8>, value: &DumpValue) {
    match value {
        DumpValue::None => out.push(NONE),
        DumpValue::Bool(b) => out.push(if *b { NEWTRUE } else { NEWFALSE }),
        DumpValue::Int(i) => write_int(out, *i),
        DumpValue::Float(f) => {
            out.push(BINFLOAT);
            out.extend_from_slice(&f.to_be_bytes());
        }
        DumpValue::Str(s) => write_str(out, s),
        DumpValue::List(items) => {
            out.push(EMPTY_LIST);
            for chunk in items.chunks(BATCH) {
                out.push(MARK);
                for item in chunk {
                    write(out, item);
                }
                out.push(APPENDS);
            }
        }
        DumpValue::Tuple(items) if items.is_empty() => out.push(EMPTY_TUPLE),
        DumpValue::Tuple(items) => {
            out.push(MARK);
            for item in items {
                write(out, item);
            }
            out.push(TUPLE);
        }
        DumpValue::Dict(items) => {
            out.push(EMPTY_DICT);
            for chunk in items.chunks(BATCH) {
                out.push(MARK);
                for (k, v) in chunk {
                    write(out, k);
                    write(out, v);
                }
                out.push(SETITEMS);
            }
        }
    }
}

fn write_int(out: &mut Vec<u8>, i: i128) {
    if let Ok(b) = u8::try_from(i) {
        out.extend_from_slice(&[BININT1, b]);
    } else if let Ok(w) = u16::try_from(i) {
        out.push(BININT2);
        out.extend_from_slice(&w.to_le_bytes());
    } else if let Ok(d) = i32::try_from(i) {
        out.push(BININT);
        out.extend_from_slice(&d.to_le_bytes());
    } else {
        // LONG1: a length byte, then the shortest little-endian two's complement.
        let bytes = i.to_le_bytes();
        let mut n = bytes.len();
        while n > 1 {
            let top = bytes[n - 1];
            let next_sign = bytes[n - 2] & 0x80;
            if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                n -= 1;
            } else {
                break;
            }
        }
        out.push(LONG1);
        // n ≤ 16, so it fits the length byte.
        out.push(n as u8);
        out.extend_from_slice(&bytes[..n]);
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(BINUNICODE);
    // Dumps never hold a 4 GiB string; a longer one is cut at a char boundary rather than
    // writing a length that lies.
    let mut end = s.len().min(u32::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u32).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// The interpreter of `scripts/torch-env.sh`'s venv; `None` (with a message) when absent,
    /// a failure under CI.
    pub(crate) fn python() -> Option<PathBuf> {
        let venv = std::env::var_os("OXCCL_TORCH_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/torch-venv")
            });
        let py = venv.join("bin/python");
        if py.is_file() {
            return Some(py);
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: {} is missing; run `bash scripts/torch-env.sh`",
            py.display()
        );
        eprintln!(
            "SKIPPED: {} missing (run `bash scripts/torch-env.sh`)",
            py.display()
        );
        None
    }

    /// What Python's `repr` of the unpickled value is.
    fn python_repr(py: &PathBuf, bytes: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("oxccl-pickle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("v{}", bytes.len()));
        std::fs::write(&file, bytes).unwrap();
        let out = Command::new(py)
            .args([
                "-c",
                "import pickle,sys; print(repr(pickle.load(open(sys.argv[1],'rb'))))",
            ])
            .arg(&file)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&file);
        assert!(
            out.status.success(),
            "python: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim_end()
            .to_string()
    }

    #[test]
    fn small_values_encode_to_the_expected_opcodes() {
        assert_eq!(to_pickle(&DumpValue::None), vec![0x80, 2, b'N', b'.']);
        assert_eq!(to_pickle(&DumpValue::Int(5)), vec![0x80, 2, b'K', 5, b'.']);
        assert_eq!(
            to_pickle(&DumpValue::Int(300)),
            vec![0x80, 2, b'M', 0x2c, 0x01, b'.']
        );
        assert_eq!(
            to_pickle(&DumpValue::Int(-1)),
            vec![0x80, 2, b'J', 0xff, 0xff, 0xff, 0xff, b'.']
        );
        // 2^31 needs LONG1 with 5 bytes (a sign byte of 0).
        assert_eq!(
            to_pickle(&DumpValue::Int(1 << 31)),
            vec![0x80, 2, 0x8a, 5, 0, 0, 0, 0x80, 0, b'.']
        );
        assert_eq!(
            to_pickle(&DumpValue::Int(-(1 << 31) - 1)),
            vec![0x80, 2, 0x8a, 5, 0xff, 0xff, 0xff, 0x7f, 0xff, b'.']
        );
        assert_eq!(
            to_pickle(&DumpValue::Tuple(vec![])),
            vec![0x80, 2, b')', b'.']
        );
    }

    #[test]
    fn round_trips_through_python() {
        let Some(py) = python() else { return };
        let v = DumpValue::dict([
            ("none", DumpValue::None),
            ("t", DumpValue::Bool(true)),
            ("f", DumpValue::Bool(false)),
            (
                "ints",
                DumpValue::List(
                    [
                        0i128,
                        255,
                        256,
                        65535,
                        65536,
                        -1,
                        i32::MIN.into(),
                        i32::MAX.into(),
                        1 << 31,
                        i64::MAX.into(),
                        i64::MIN.into(),
                        u64::MAX.into(),
                        i128::MAX,
                        i128::MIN,
                    ]
                    .into_iter()
                    .map(DumpValue::Int)
                    .collect(),
                ),
            ),
            (
                "floats",
                DumpValue::List(vec![
                    DumpValue::Float(1.5),
                    DumpValue::Float(-0.25),
                    DumpValue::Float(1e300),
                ]),
            ),
            ("s", DumpValue::str("nccl:send 1->0 «é»")),
            (
                "tuple",
                DumpValue::Tuple(vec![DumpValue::str("0"), DumpValue::str("default_pg")]),
            ),
            ("empty", DumpValue::Dict(vec![])),
            (
                "nested",
                DumpValue::List(vec![DumpValue::List(vec![
                    DumpValue::Int(3),
                    DumpValue::Int(4),
                ])]),
            ),
        ]);
        let expected = format!(
            "{{'none': None, 't': True, 'f': False, 'ints': [0, 255, 256, 65535, 65536, -1, \
             {}, {}, {}, {}, {}, {}, {}, {}], 'floats': [1.5, -0.25, 1e+300], \
             's': 'nccl:send 1->0 «é»', 'tuple': ('0', 'default_pg'), 'empty': {{}}, \
             'nested': [[3, 4]]}}",
            i32::MIN,
            i32::MAX,
            1i64 << 31,
            i64::MAX,
            i64::MIN,
            u64::MAX,
            i128::MAX,
            i128::MIN
        );
        assert_eq!(python_repr(&py, &to_pickle(&v)), expected);
    }

    #[test]
    fn long_lists_and_dicts_are_batched_and_complete() {
        let Some(py) = python() else { return };
        let list = DumpValue::List((0..2500).map(DumpValue::Int).collect());
        let dict = DumpValue::Dict(
            (0..2100)
                .map(|i| (DumpValue::Int(i), DumpValue::Bool(i % 2 == 0)))
                .collect(),
        );
        let v = DumpValue::Tuple(vec![list, dict]);
        let bytes = to_pickle(&v);
        let out = python_repr(&py, &bytes);
        let expected_list: Vec<String> = (0..2500).map(|i| i.to_string()).collect();
        assert!(out.starts_with(&format!(
            "([{}], {{0: True, 1: False",
            expected_list.join(", ")
        )));
        assert!(out.ends_with("2098: True, 2099: False})"));
    }
}
