//! The element type `issue` hands each cached NCCL release (`scripts/fetch-nccl.sh`), on the
//! host: the features the loader resolves for the release, through [`super::issue_op::wire`], give a
//! `ncclDataType_t` that the release's own `nccl.h` names. fp8 that is only moved goes to a
//! release without fp8 as `ncclUint8`; a release with fp8 gets `ncclFloat8e4m3`/`e5m2`.

use super::issue_op::wire;
use oxccl_core::{CommOp, DataType, Feature, RawBuf, RawBufMut, ReduceOp};
use oxccl_loader::Library;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Every cached release's folder, oldest first; a failure telling how to fill the cache when
/// it is empty (a skip only with `OXCCL_SKIP_REAL_NCCL=1`).
fn releases() -> Vec<PathBuf> {
    // Where scripts/fetch-nccl.sh keeps the releases (`OXCCL_NCCL_CACHE`, as it honours it).
    let cache = std::env::var_os("OXCCL_NCCL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/nccl"));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&cache)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("lib/libnccl.so.2").is_file() && d.join("include/nccl.h").is_file());
    let key = |d: &PathBuf| -> Vec<u32> {
        let name = d.file_name().unwrap_or_default().to_string_lossy();
        name.split('.').map(|n| n.parse().unwrap_or(0)).collect()
    };
    dirs.sort_by_key(key);
    if dirs.is_empty() {
        let msg = format!(
            "no NCCL releases under {}: run scripts/fetch-nccl.sh (or set OXCCL_SKIP_REAL_NCCL=1)",
            cache.display()
        );
        assert!(
            std::env::var("OXCCL_SKIP_REAL_NCCL").as_deref() == Ok("1"),
            "{msg}"
        );
        eprintln!("skipped: {msg}");
    }
    dirs
}

/// `ncclDataType_t` of a release's header: value → the names it has (`ncclNumTypes` left out).
fn header_types(include: &Path) -> HashMap<i32, Vec<String>> {
    let text = std::fs::read_to_string(include.join("nccl.h")).unwrap();
    let end = text
        .find("} ncclDataType_t;")
        .expect("ncclDataType_t in nccl.h");
    let start = text[..end].rfind("typedef enum").unwrap();
    let mut out: HashMap<i32, Vec<String>> = HashMap::new();
    for item in text[start + "typedef enum".len()..end].split([',', '\n', '{']) {
        let Some((name, value)) = item.split_once('=') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.starts_with("ncclNumTypes") {
            continue;
        }
        if let Ok(v) = value.parse::<i32>() {
            out.entry(v).or_default().push(name.to_string());
        }
    }
    out
}

/// One operation of every kind on `dt` (addresses and lengths are never read here).
fn every_op(dt: DataType) -> Vec<CommOp<'static>> {
    let (s, r) = (RawBuf::new(0x1000, 4), RawBufMut::new(0x9000, 4));
    let op = ReduceOp::Sum;
    vec![
        CommOp::AllReduce {
            send: s,
            recv: r,
            dtype: dt,
            op,
        },
        CommOp::Broadcast {
            send: s,
            recv: r,
            dtype: dt,
            root: 0,
        },
        CommOp::Reduce {
            send: s,
            recv: r,
            dtype: dt,
            op,
            root: 0,
        },
        CommOp::AllGather {
            send: s,
            recv: r,
            dtype: dt,
        },
        CommOp::ReduceScatter {
            send: s,
            recv: r,
            dtype: dt,
            op,
        },
        CommOp::AllToAll {
            send: s,
            recv: r,
            dtype: dt,
        },
        CommOp::AllToAllV {
            send: s,
            recv: r,
            dtype: dt,
            send_counts: &[4],
            recv_counts: &[4],
        },
        CommOp::Gather {
            send: s,
            recv: r,
            dtype: dt,
            root: 0,
        },
        CommOp::Scatter {
            send: s,
            recv: r,
            dtype: dt,
            root: 0,
        },
        CommOp::AllGatherV {
            send: s,
            recv: r,
            dtype: dt,
            counts: &[4],
        },
        CommOp::ReduceScatterV {
            send: s,
            recv: r,
            dtype: dt,
            op,
            counts: &[4],
        },
        CommOp::Send {
            buf: s,
            dtype: dt,
            peer: 0,
        },
        CommOp::Recv {
            buf: r,
            dtype: dt,
            peer: 0,
        },
    ]
}

#[test]
fn fp8_moves_as_the_uint8_of_the_loaded_header_without_fp8() {
    let mut saw_without = false;
    for dir in releases() {
        let lib = Library::open(dir.join("lib/libnccl.so.2")).expect("the cached release loads");
        let types = header_types(&dir.join("include"));
        let named = |code: i32| types.get(&code).cloned().unwrap_or_default();
        let has_fp8 = lib.features().has(Feature::Float8);
        // The loader's verdict agrees with the release's own header.
        assert_eq!(
            has_fp8,
            types.values().flatten().any(|n| n == "ncclFloat8e4m3"),
            "{}",
            dir.display()
        );
        saw_without |= !has_fp8;
        for (dt, own) in [
            (DataType::Float8E4M3, "ncclFloat8e4m3"),
            (DataType::Float8E5M2, "ncclFloat8e5m2"),
        ] {
            for op in every_op(dt) {
                let sent = wire(&op, lib.features());
                let code = crate::codes::data_type(sent.dtype().unwrap());
                let want = if has_fp8 || op.kind().reduces() {
                    // A reduction keeps its type (the check refuses it without fp8).
                    own
                } else {
                    "ncclUint8"
                };
                if has_fp8 || !op.kind().reduces() {
                    assert!(
                        named(code).iter().any(|n| n == want),
                        "{} {}: code {code} is {:?}, not {want}",
                        lib.version(),
                        op.kind(),
                        named(code)
                    );
                } else {
                    assert_eq!(code, crate::codes::data_type(dt));
                    assert!(named(code).is_empty(), "{}", lib.version());
                }
                // Same buffers, same count: fp8 is one byte, as uint8.
                assert_eq!(
                    (sent.numel_in(), sent.numel_out()),
                    (op.numel_in(), op.numel_out())
                );
            }
        }
        // Every other type goes as itself, under the header's name for it.
        for dt in DataType::ALL.into_iter().filter(|d| !d.is_fp8()) {
            for op in every_op(dt) {
                assert_eq!(wire(&op, lib.features()).dtype(), Some(dt));
            }
        }
    }
    let cached = !releases().is_empty();
    assert!(
        saw_without || !cached,
        "no cached release without fp8 (2.23.4 or older): run scripts/fetch-nccl.sh"
    );
}
