//! Every function type of [`Api`] against the prototype in each cached release's `nccl.h`,
//! compiled with gcc: the C declaration each field's Rust type stands for (built from
//! [`Api::SIGNATURES`], which the table's own macro generates) must initialise a pointer from
//! the header's function without an incompatible-pointer-types diagnostic, and every by-value
//! type must have the C type's size and alignment. Also: the table covers every `nccl*` function
//! each header declares, and each field's since-release agrees with the headers.
//!
//! gcc compares function types exactly: argument count, order and each type, and the return
//! type. An enum is compatible only with its underlying integer type (`unsigned int` for NCCL's
//! enums in gcc), never with `int` nor another enum, so the Rust aliases (`RawResult`,
//! `RawDataType`, `RawRedOp`, …) map to the enum typedefs, and passing one where the header
//! wants another fails here; the alias checks below pin each alias to the 32-bit integer it is.
//! (An enum and a C `int` share the ABI; the check is stricter than the ABI needs.) Two things
//! gcc lets through are checked by hand: an unprototyped `f()` in the header matches any
//! prototype, so those must take no argument; and a deprecated function (`ncclResetDebugInit`)
//! only warns. Headers are read with `NCCL_OS_LINUX` defined, as the Linux library is built.

mod common;

use core::ffi::{c_int, c_void};
use oxccl_loader::api::{RustType, Signature};
use oxccl_loader::raw::*;
use oxccl_loader::Api;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The identity: `const _: fn(A) -> B = same;` builds only when `A` and `B` are one type.
fn same<T>(x: T) -> T {
    x
}

// Each alias the mapping names is the Rust type its C type needs (a build error otherwise):
// handles are pointers, enums and `ncclResult_t` are 32-bit integers. The communicator and
// stream handles are `#[repr(transparent)]` newtypes of a pointer: the same ABI, checked by
// their one field's type and by size and alignment.
const _: fn(RawComm) -> *mut c_void = |c| c.0;
const _: fn(RawStream) -> *mut c_void = |s| s.0;
const _: () = assert!(
    size_of::<RawComm>() == size_of::<*mut c_void>()
        && align_of::<RawComm>() == align_of::<*mut c_void>()
        && size_of::<RawStream>() == size_of::<*mut c_void>()
        && align_of::<RawStream>() == align_of::<*mut c_void>()
);
const _: fn(RawWindow) -> *mut c_void = same;
const _: fn(RawParamHandle) -> *mut c_void = same;
const _: fn(RawResult) -> c_int = same;
const _: fn(RawDataType) -> c_int = same;
const _: fn(RawRedOp) -> c_int = same;
const _: fn(RawScalarResidence) -> c_int = same;
const _: fn(RawMemStat) -> c_int = same;

/// The C type of one Rust name of the table, without pointers: the typedef `nccl.h` uses.
fn c_base(rust: &str) -> Option<&'static str> {
    Some(match rust {
        "RawComm" => "ncclComm_t",
        "RawStream" => "cudaStream_t",
        "RawWindow" => "ncclWindow_t",
        "RawParamHandle" => "ncclParamHandle_t",
        "RawResult" => "ncclResult_t",
        "RawDataType" => "ncclDataType_t",
        "RawRedOp" => "ncclRedOp_t",
        "RawScalarResidence" => "ncclScalarResidence_t",
        "RawMemStat" => "ncclCommMemStat_t",
        "RawConfig" => "ncclConfig_t",
        "RawSimInfo" => "ncclSimInfo_t",
        "RawWaitSignalDesc" => "ncclWaitSignalDesc_t",
        "RawCollConfig" => "ncclCollConfig_t",
        "RawEncryptionConfig" => "ncclEncryptionConfig_t",
        "UniqueId" => "ncclUniqueId",
        "c_void" => "void",
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "usize" => "size_t",
        "i8" => "int8_t",
        "i16" => "int16_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        _ => return None,
    })
}

/// The C type of a Rust type as written in the table: `*mut T` is `T*`, `*const T` is
/// `T const*` (so `*mut *const c_char` is `char const**`). `Err` names what has no mapping.
fn c_type(rust: &str) -> Result<String, String> {
    let t = rust.trim();
    if let Some(rest) = t.strip_prefix('*') {
        let rest = rest.trim_start();
        if let Some(inner) = rest.strip_prefix("mut ") {
            return Ok(format!("{}*", c_type(inner)?));
        }
        if let Some(inner) = rest.strip_prefix("const ") {
            return Ok(format!("{} const*", c_type(inner)?));
        }
    }
    c_base(t)
        .map(str::to_owned)
        .ok_or_else(|| format!("no C type for Rust type `{t}`"))
}

/// `(args)` in C for a signature: `(void)` when it takes none.
fn c_args(sig: &Signature) -> Result<String, String> {
    if sig.args.is_empty() {
        return Ok("void".to_owned());
    }
    let args: Result<Vec<String>, String> = sig.args.iter().map(|a| c_type(a.name)).collect();
    Ok(args?.join(", "))
}

/// The C return type of a signature.
fn c_ret(sig: &Signature) -> Result<String, String> {
    sig.ret.map_or(Ok("void".to_owned()), |r| c_type(r.name))
}

/// The C prototype a field's Rust type stands for, for messages.
fn c_prototype(sig: &Signature) -> Result<String, String> {
    Ok(format!("{} {}({})", c_ret(sig)?, sig.symbol, c_args(sig)?))
}

/// The `nccl*` functions the preprocessed header declares (a name followed by `(`, outside
/// string literals; macros are gone and `pnccl*` names do not start with `nccl`), each with
/// whether its parameter list is empty: `f()`, which C leaves unprototyped.
fn declared_functions(preprocessed: &str) -> BTreeMap<String, bool> {
    let mut code = String::with_capacity(preprocessed.len());
    let mut in_string = false;
    let mut escaped = false;
    for ch in preprocessed.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
            continue;
        }
        if ch == '"' {
            in_string = true;
            code.push(' ');
        } else {
            code.push(ch);
        }
    }
    let mut out = BTreeMap::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_alphabetic() || b == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let ident = &code[start..i];
            if let Some(params) = code[i..].trim_start().strip_prefix('(') {
                if ident.starts_with("nccl") {
                    let empty = params.trim_start().starts_with(')');
                    out.insert(ident.to_owned(), empty);
                }
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Runs gcc with the stubs and the release's headers on `file` and `extra` flags.
fn gcc(dir: &Path, include: &Path, extra: &[&str], file: &Path) -> std::process::Output {
    Command::new("gcc")
        .args(["-std=gnu11", "-DNCCL_OS_LINUX"])
        .arg("-I")
        .arg(dir)
        .arg("-I")
        .arg(include)
        .args(extra)
        .arg(file)
        .output()
        .expect("gcc runs")
}

/// `_Static_assert` that the C type of `t` has its Rust size and alignment.
fn layout_assert(out: &mut String, t: &RustType, c: &str, what: &str) {
    out.push_str(&format!(
        "_Static_assert(sizeof({c}) == {} && _Alignof({c}) == {}, \"{what}: {c} is not {} bytes aligned to {} like {}\");\n",
        t.size, t.align, t.size, t.align, t.name
    ));
}

/// Checks one release; returns the functions checked, pushes each problem to `failures`.
fn check_release(r: &common::Release, failures: &mut Vec<String>) -> usize {
    let dir = common::scratch(&format!("abi-{}", r.version));
    common::write_cuda_stubs(&dir);

    // Which functions this header declares (with `NCCL_OS_LINUX`, as NCCL is built on Linux).
    let pp_src = dir.join("pp.c");
    std::fs::write(&pp_src, "#include <stddef.h>\n#include \"nccl.h\"\n").unwrap();
    let pp = gcc(&dir, &r.include, &["-E", "-P"], &pp_src);
    assert!(
        pp.status.success(),
        "{}: gcc -E: {}",
        r.version,
        String::from_utf8_lossy(&pp.stderr)
    );
    let declared = declared_functions(&String::from_utf8_lossy(&pp.stdout));

    // Reverse: every function of the header is in the table.
    for f in declared.keys() {
        if !Api::SYMBOLS.contains(&f.as_str()) {
            failures.push(format!(
                "{}: {f} is declared in nccl.h but missing from Api",
                r.version
            ));
        }
    }

    let version = common::version_key(&r.version);
    // `ncclResetDebugInit` is deprecated in its headers; taking its address is not an ABI issue.
    // `size_t` comes with CUDA's headers in real builds, here with `stddef.h`.
    let mut c = String::from(
        "#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"\n#include <stddef.h>\n#include \"nccl.h\"\n",
    );
    let mut lines: Vec<(usize, &'static str)> = Vec::new();
    let mut checked = 0;
    for sig in Api::SIGNATURES {
        let here = declared.contains_key(sig.symbol);
        let since_says = common::version_key(sig.since) <= version;
        if here != since_says {
            failures.push(format!(
                "{}: {} is {}declared, but Api says since {}",
                r.version,
                sig.symbol,
                if here { "" } else { "not " },
                sig.since
            ));
        }
        if !here {
            continue;
        }
        // gcc takes an unprototyped `f()` for any prototype, so the count is checked here:
        // NCCL defines these in C++, where `()` takes nothing.
        if declared.get(sig.symbol) == Some(&true) && !sig.args.is_empty() {
            failures.push(format!(
                "{}: {} takes no argument in nccl.h, Api gives it {}",
                r.version,
                sig.symbol,
                sig.args.len()
            ));
        }
        let (ret, args) = match (c_ret(sig), c_args(sig)) {
            (Ok(ret), Ok(args)) => (ret, args),
            (Err(e), _) | (_, Err(e)) => {
                failures.push(format!("{}: {e}", sig.symbol));
                continue;
            }
        };
        for (i, a) in sig.args.iter().enumerate() {
            if let Ok(ct) = c_type(a.name) {
                let what = format!("{} argument {}", sig.symbol, i + 1);
                layout_assert(&mut c, a, &ct, &what);
                lines.push((c.lines().count(), sig.symbol));
            }
        }
        if let (Some(t), Ok(ct)) = (&sig.ret, c_ret(sig)) {
            layout_assert(&mut c, t, &ct, &format!("{} return", sig.symbol));
            lines.push((c.lines().count(), sig.symbol));
        }
        c.push_str(&format!(
            "static {ret} (*const check_{0})({args}) __attribute__((used)) = {0};\n",
            sig.symbol
        ));
        lines.push((c.lines().count(), sig.symbol));
        checked += 1;
    }
    let src = dir.join("abi.c");
    std::fs::write(&src, &c).unwrap();
    let obj = dir.join("abi.o");
    let out = gcc(
        &dir,
        &r.include,
        &[
            "-c",
            "-Wall",
            "-Werror",
            "-Werror=incompatible-pointer-types",
            "-o",
            obj.to_str().unwrap(),
        ],
        &src,
    );
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut named = BTreeSet::new();
        for line in stderr.lines() {
            // `…/abi.c:LINE:COL: error: …`
            let Some((_, rest)) = line.split_once("abi.c:") else {
                continue;
            };
            let Some(n) = rest.split(':').next().and_then(|n| n.parse::<usize>().ok()) else {
                continue;
            };
            if let Some((_, sym)) = lines.iter().find(|(l, _)| *l == n) {
                named.insert(*sym);
            }
        }
        for sym in &named {
            let sig = Api::SIGNATURES.iter().find(|s| s.symbol == *sym).unwrap();
            failures.push(format!(
                "{}: {sym}: the Rust type means `{}`, which nccl.h does not declare",
                r.version,
                c_prototype(sig).unwrap_or_default()
            ));
        }
        failures.push(format!("{}: gcc says:\n{stderr}", r.version));
    }
    let _ = std::fs::remove_dir_all(&dir);
    checked
}

#[test]
fn every_function_type_matches_every_cached_header() {
    let releases = common::releases_or_fail();
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for r in &releases {
        let n = check_release(r, &mut failures);
        checked.push(format!("{} ({n} functions)", r.version));
    }
    assert!(
        failures.is_empty(),
        "Api vs nccl.h:\n{}",
        failures.join("\n")
    );
    if !releases.is_empty() {
        assert!(
            releases.iter().any(|r| r.version == "2.32.3"),
            "the newest header the table covers, 2.32.3, is not cached"
        );
    }
    println!("function types checked for: {}", checked.join(", "));
}

#[test]
fn every_rust_type_of_the_table_has_a_c_type() {
    assert_eq!(Api::SIGNATURES.len(), Api::SYMBOLS.len());
    for (sig, sym) in Api::SIGNATURES.iter().zip(Api::SYMBOLS) {
        assert_eq!(sig.symbol, *sym, "SIGNATURES and SYMBOLS in one order");
        assert!(
            c_prototype(sig).is_ok(),
            "{}: {:?}",
            sig.symbol,
            c_prototype(sig)
        );
    }
}

#[test]
fn the_mapping_spells_pointers_as_c_does() {
    assert_eq!(c_type("*mut RawComm").as_deref(), Ok("ncclComm_t*"));
    assert_eq!(c_type("*const c_void").as_deref(), Ok("void const*"));
    assert_eq!(
        c_type("*mut *mut *const c_char").as_deref(),
        Ok("char const***")
    );
    assert!(c_type("f32").is_err());
}
