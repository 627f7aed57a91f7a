//! `oxccl info`: which NCCL was loaded, how fast, and what it can do.

use crate::json;
use oxccl_core::{Feature, FeatureSet};
use oxccl_loader::{Api, Library, LoadError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Options of `oxccl info`.
pub struct Options {
    library: Option<PathBuf>,
    json: bool,
}

impl Options {
    /// Parses the arguments after `info`.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut opts = Options {
            library: None,
            json: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--json" => opts.json = true,
                "--library" => match it.next() {
                    Some(p) => opts.library = Some(PathBuf::from(p)),
                    None => return Err("--library needs a path".to_owned()),
                },
                s if s.starts_with("--library=") => {
                    opts.library = Some(PathBuf::from(&s["--library=".len()..]));
                }
                other => return Err(format!("info: unknown option `{other}`")),
            }
        }
        Ok(opts)
    }
}

/// Runs `oxccl info`; non-zero when no library loads.
pub fn run(opts: &Options) -> ExitCode {
    let start = Instant::now();
    let loaded = Library::load_from(opts.library.as_deref());
    let total = start.elapsed();
    match loaded {
        Ok(lib) if opts.json => println!("{}", report_json(&lib, total)),
        Ok(lib) => print!("{}", report_text(&lib, total)),
        Err(e) if opts.json => {
            println!("{}", error_json(&e));
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("oxccl: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report_text(lib: &Library, total: Duration) -> String {
    let v = lib.version();
    let mut s = String::new();
    s.push_str(&format!("library:   {}\n", lib.path().display()));
    s.push_str(&format!(
        "version:   NCCL {v} (code {})\n",
        v.code().unwrap_or(0)
    ));
    s.push_str(&format!(
        "load time: {:.3} ms (dlopen + resolve {} symbols + version), {:.3} ms with discovery\n",
        ms(lib.load_time()),
        Api::SYMBOLS.len(),
        ms(total)
    ));
    s.push_str(&format!(
        "functions: {} of the {} in nccl.h up to 2.32.3 exported\n",
        lib.api().present_count(),
        Api::SYMBOLS.len()
    ));
    s.push_str("features:\n");
    for (f, res) in lib.features().iter() {
        let state = match res {
            Ok(()) => "available".to_owned(),
            Err(why) => format!("unavailable: {why}"),
        };
        s.push_str(&format!(
            "  {:<20} since {:<7} {state}\n",
            f.name(),
            f.since().to_string()
        ));
    }
    s
}

fn feature_json(set: &FeatureSet, f: Feature) -> String {
    let mut s = format!(
        "{{\"name\": {}, \"since\": {}, \"available\": {}",
        json::string(f.name()),
        json::string(&f.since().to_string()),
        set.has(f)
    );
    if let Err(why) = set.check(f) {
        s.push_str(&format!(", \"reason\": {}", json::string(&why.to_string())));
    }
    s.push('}');
    s
}

fn report_json(lib: &Library, total: Duration) -> String {
    let v = lib.version();
    let features: Vec<String> = Feature::ALL
        .iter()
        .map(|f| feature_json(lib.features(), *f))
        .collect();
    format!(
        "{{\"library\": {}, \"version\": {}, \"version_code\": {}, \"load_ms\": {:.3}, \
         \"load_with_discovery_ms\": {:.3}, \"functions_exported\": {}, \"functions_known\": {}, \
         \"features\": [\n  {}\n]}}",
        json::string(&lib.path().display().to_string()),
        json::string(&v.to_string()),
        v.code().unwrap_or(0),
        ms(lib.load_time()),
        ms(total),
        lib.api().present_count(),
        Api::SYMBOLS.len(),
        features.join(",\n  ")
    )
}

fn error_json(e: &LoadError) -> String {
    let tried = match e {
        LoadError::NothingFound { tried } => tried
            .iter()
            .map(|t| {
                format!(
                    "{{\"place\": {}, \"reason\": {}}}",
                    json::string(&t.place),
                    json::string(&t.reason)
                )
            })
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    format!(
        "{{\"error\": {}, \"tried\": [{}]}}",
        json::string(&e.to_string()),
        tried.join(", ")
    )
}
