//! `RawConfig` and `RawConfig::size_for` against the `ncclConfig_t` of every cached release's
//! header, compiled with gcc: the field list, each offset, and sizeof.

mod common;

use oxccl_core::ConfigField;
use oxccl_loader::RawConfig;

#[test]
fn layout_matches_every_cached_header() {
    let releases = common::releases();
    if releases.is_empty() {
        println!(
            "SKIPPED: no NCCL headers under {}; run scripts/fetch-nccl.sh",
            common::cache_dir().display()
        );
        return;
    }
    let mut checked = Vec::new();
    for r in &releases {
        let version = common::version_of(&r.version);
        let ours: Vec<ConfigField> = RawConfig::fields_for(version).collect();
        let Some((size, offsets)) = common::c_layout(r) else {
            assert!(
                ours.is_empty(),
                "{}: header has no ncclConfig_t, we send {ours:?}",
                r.version
            );
            checked.push(format!("{} (no config)", r.version));
            continue;
        };
        let mut expected = vec![("size", 0usize), ("magic", 8), ("version", 12)];
        expected.extend(ours.iter().map(|f| (f.c_name(), RawConfig::offset_of(*f))));
        let theirs: Vec<(&str, usize)> = offsets.iter().map(|(n, o)| (n.as_str(), *o)).collect();
        assert_eq!(theirs, expected, "{}: fields and offsets", r.version);
        assert_eq!(
            RawConfig::size_for(version),
            size,
            "{}: sizeof(ncclConfig_t)",
            r.version
        );
        checked.push(format!(
            "{} ({size} bytes, {} fields)",
            r.version,
            ours.len()
        ));
    }
    println!("layout checked for: {}", checked.join(", "));
}
