use super::*;
use oxccl_core::op::OpKind;
use oxccl_rules::recorder::{profiling_name, TensorMeta, TraceRecord};
use serde_json::json;

/// The JSON dump's text of `v`, parsed.
fn json_value(v: &DumpValue) -> serde_json::Value {
    serde_json::from_str(&to_json(v)).unwrap()
}

const MS: u64 = 1_000_000;

fn meta(rank: u32, world: u32) -> DumpMeta {
    DumpMeta {
        rank,
        world_size: world,
        hostname: "node-a".into(),
        pid: 4242,
        comm_lib_version: "2.21.5".into(),
        note: None,
    }
}

fn all_reduce(seq: u64, timing: bool) -> TraceRecord {
    TraceRecord {
        pg_id: 0,
        collective_seq: seq,
        p2p_seq: 0,
        op_id: seq,
        profiling_name: profiling_name(OpKind::AllReduce, 0, None),
        inputs: vec![TensorMeta::new(&[3, 4], DataType::Float32)],
        outputs: vec![TensorMeta::new(&[3, 4], DataType::Float32)],
        time_created_ns: seq * MS,
        timeout_ms: 600_000,
        is_p2p: false,
        timing,
    }
}

/// Seed 28/29's ring: seq 1 completed and retired (with a duration), seq 2 started.
fn recorder() -> FlightRecorder {
    let mut r = FlightRecorder::new(10);
    r.add_pg(PgConfig {
        id: 0,
        name: "0".into(),
        desc: "default_pg".into(),
        ranks: vec![0, 1],
    });
    let a = r.record(all_reduce(1, true)).unwrap();
    r.update_state(a, TraceState::Started, MS + 1);
    r.update_state(a, TraceState::Completed, MS + 5);
    r.set_duration(a, 2_500_000);
    r.retire(a);
    let b = r.record(all_reduce(2, true)).unwrap();
    r.update_state(b, TraceState::Started, 2 * MS + 1);
    r
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-dump-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn json_form_has_pytorchs_keys_and_values() {
    let v = json_value(&dump_value(&meta(0, 2), &recorder(), false, Form::Json));
    assert_eq!(v["version"], "2.10");
    assert_eq!(v["comm_lib_version"], "2.21.5");
    assert_eq!(
        v["pg_config"],
        json!({"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}})
    );
    // JSON keeps pg_status as strings, as PyTorch's dump_json does.
    assert_eq!(
        v["pg_status"],
        json!({"0": {"last_enqueued_collective": "2", "last_started_collective": "2",
                     "last_completed_collective": "1"}})
    );
    assert_eq!(
        (v["rank"].clone(), v["world_size"].clone()),
        (json!(0), json!(2))
    );
    assert_eq!(v["hostname"], "node-a");
    assert_eq!(v["pid"], 4242);
    let e = &v["entries"];
    assert_eq!(e.as_array().unwrap().len(), 2);
    assert_eq!(
        e[0],
        json!({
            "record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
            "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
            "profiling_name": "nccl:all_reduce", "time_created_ns": MS,
            "duration_ms": 2.5,
            "input_sizes": [[3, 4]], "input_dtypes": ["Float"],
            "output_sizes": [[3, 4]], "output_dtypes": ["Float"],
            "state": "completed",
            "time_discovered_started_ns": MS + 1, "time_discovered_completed_ns": MS + 5,
            "retired": true, "timeout_ms": 600_000, "is_p2p": false, "frames": [],
        })
    );
    // Not seen completed: 0 in JSON (PyTorch's JSON writer), no duration key.
    assert_eq!(e[1]["state"], "started");
    assert_eq!(e[1]["time_discovered_completed_ns"], 0);
    assert_eq!(e[1]["retired"], false);
    assert!(e[1].get("duration_ms").is_none());
}

#[test]
fn pickle_form_differs_only_where_pytorch_does() {
    let r = recorder();
    let DumpValue::Dict(top) = dump_value(&meta(1, 2), &r, false, Form::Pickle) else {
        panic!("not a dict")
    };
    let get = |k: &str| {
        top.iter()
            .find(|(key, _)| *key == DumpValue::str(k))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let DumpValue::Dict(status) = get("pg_status") else {
        panic!()
    };
    assert_eq!(
        status[0].1,
        DumpValue::dict([
            ("last_enqueued_collective", DumpValue::Int(2)),
            ("last_started_collective", DumpValue::Int(2)),
            ("last_completed_collective", DumpValue::Int(1)),
        ])
    );
    let DumpValue::List(entries) = get("entries") else {
        panic!()
    };
    let DumpValue::Dict(second) = &entries[1] else {
        panic!()
    };
    let field = |k: &str| {
        second
            .iter()
            .find(|(key, _)| *key == DumpValue::str(k))
            .map(|(_, v)| v)
    };
    assert_eq!(
        field("time_discovered_completed_ns"),
        Some(&DumpValue::None)
    );
    assert_eq!(
        field("process_group"),
        Some(&DumpValue::Tuple(vec![
            DumpValue::str("0"),
            DumpValue::str("default_pg")
        ]))
    );
}

#[test]
fn only_active_keeps_in_flight_entries_and_full_status() {
    let v = json_value(&dump_value(&meta(0, 2), &recorder(), true, Form::Json));
    let e = v["entries"].as_array().unwrap();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["collective_seq_id"], 2);
    assert_eq!(v["pg_status"]["0"]["last_completed_collective"], "1");
}

#[test]
fn unknown_groups_get_a_config_and_empty_rings_dump() {
    let mut r = FlightRecorder::new(4);
    r.record(TraceRecord {
        pg_id: 7,
        ..all_reduce(1, false)
    })
    .unwrap();
    let v = json_value(&dump_value(&meta(2, 3), &r, false, Form::Json));
    assert_eq!(
        v["pg_config"]["7"],
        json!({"name": "7", "desc": "undefined", "ranks": "[0, 1, 2]"})
    );
    assert_eq!(v["entries"][0]["process_group"], json!(["7", "undefined"]));
    assert_eq!(v["pg_status"]["7"]["last_completed_collective"], "-1");
    let empty = json_value(&dump_value(
        &meta(0, 1),
        &FlightRecorder::new(0),
        false,
        Form::Json,
    ));
    assert_eq!(empty["entries"], json!([]));
    assert_eq!(empty["pg_config"], json!({}));
}

#[test]
fn write_dump_writes_both_files_atomically() {
    let dir = tmp_dir("write").join("nested");
    let files = write_dump(&dir, &meta(1, 2), &recorder(), false).unwrap();
    assert_eq!(files.json, dir.join("rank_1.json"));
    assert_eq!(files.pickle, dir.join("trace_1"));
    let text = std::fs::read_to_string(&files.json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["entries"][1]["state"], "started");
    let pickled = std::fs::read(&files.pickle).unwrap();
    assert_eq!(&pickled[..2], &[0x80, 2]);
    assert_eq!(pickled.last(), Some(&b'.'));
    // Rewriting replaces; no temp file is left.
    write_dump(&dir, &meta(1, 2), &recorder(), true).unwrap();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, vec!["rank_1.json", "trace_1"]);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn bad_arguments_are_named() {
    let r = recorder();
    let err = |dir: &Path, m: DumpMeta| {
        let e = write_dump(dir, &m, &r, false).unwrap_err();
        (e.kind(), e.to_string())
    };
    let d = tmp_dir("bad");
    assert_eq!(
        err(Path::new(""), meta(0, 2)),
        (io::ErrorKind::InvalidInput, "dir: empty path".into())
    );
    assert_eq!(
        err(&d, meta(0, 0)),
        (
            io::ErrorKind::InvalidInput,
            "meta.world_size: must be at least 1".into()
        )
    );
    assert_eq!(
        err(&d, meta(2, 2)),
        (
            io::ErrorKind::InvalidInput,
            "meta.rank: 2 is outside world size 2".into()
        )
    );
    assert!(!d.exists());
    // A file where the directory should be: the I/O error, nothing written.
    let f = tmp_dir("file");
    std::fs::write(&f, b"x").unwrap();
    assert!(write_dump(&f, &meta(0, 1), &r, false).is_err());
    let _ = std::fs::remove_file(&f);
}

#[test]
fn dtype_names_are_pytorchs() {
    let names: Vec<&str> = DataType::ALL.iter().map(|&d| torch_dtype_name(d)).collect();
    assert_eq!(
        names,
        vec![
            "Char",
            "Byte",
            "Int",
            "UInt32",
            "Long",
            "UInt64",
            "Half",
            "Float",
            "Double",
            "BFloat16",
            "Float8_e4m3fn",
            "Float8_e5m2"
        ]
    );
}

#[test]
fn dir_from_env() {
    // The only test touching this variable.
    std::env::set_var(TRACE_DIR_VAR, "/tmp/fr");
    assert_eq!(dump_dir_from_env(), Some(PathBuf::from("/tmp/fr")));
    std::env::set_var(TRACE_DIR_VAR, "");
    assert_eq!(dump_dir_from_env(), None);
    std::env::remove_var(TRACE_DIR_VAR);
    assert_eq!(dump_dir_from_env(), None);
    assert!(!DumpMeta::new(0, 1).hostname.is_empty());
}

#[test]
fn python_reads_the_pickle_as_the_same_tree() {
    let Some(py) = crate::recorder::pickle::tests::python() else {
        return;
    };
    let dir = tmp_dir("py");
    let files = write_dump(&dir, &meta(1, 2), &recorder(), false).unwrap();
    let out = std::process::Command::new(py)
        .args([
            "-c",
            "import pickle,sys,json; print(json.dumps(pickle.load(open(sys.argv[1],'rb'))))",
        ])
        .arg(&files.pickle)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_python: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = json_value(&dump_value(&meta(1, 2), &recorder(), false, Form::Pickle));
    assert_eq!(from_python, expected);
    assert_eq!(
        from_python["entries"][1]["time_discovered_completed_ns"],
        json!(null)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
