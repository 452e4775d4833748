//! Unit tests of the spec types.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn json_round_trip_and_defaults() {
    let mut spec = TaskSpec::command(["echo", "hi"]);
    spec.env.push(EnvVar { key: "A".into(), value: "1".into() });
    spec.after.push(TaskId(3));
    spec.items = Some(10);
    spec.estimate.batch_max = Some(4);
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<TaskSpec>(&json).unwrap(), spec);

    let minimal: TaskSpec = serde_json::from_str(r#"{"argv":["true"]}"#).unwrap();
    assert_eq!(minimal, TaskSpec::command(["true"]));
    assert!(minimal.retry_on_interrupt);
    assert!(serde_json::from_str::<TaskSpec>(r#"{"argv":["x"],"bogus":1}"#).is_err());
}

#[test]
fn estimate_conversion() {
    let e = EstimateSpec {
        memory_fixed: 100,
        memory_per_item: 10,
        batch_min: 2,
        batch_max: Some(8),
        cpu_millis: 250,
        cpus_exact: true,
        class: "x.y".into(),
        ..EstimateSpec::default()
    }
    .to_estimate();
    assert_eq!(e.memory_for(8), Some(180));
    assert_eq!((e.batch_min(), e.batch_max(), e.cpus()), (2, 8, 250));
    assert!(!e.cpus_reducible());
    assert_eq!(e.class().as_str(), "x.y");
    assert!(e.validate().is_ok());
    let d = EstimateSpec::default().to_estimate();
    assert_eq!((d.batch_min(), d.batch_max(), d.cpus()), (1, 1, 1000));
    // An invalid estimate converts; admission rejects it.
    let bad = EstimateSpec { gpu_memory_fixed: 1, ..EstimateSpec::default() }.to_estimate();
    assert!(bad.validate().is_err());
}

#[test]
fn validation_names_the_field() {
    let ok = TaskSpec::command(["true"]);
    assert_eq!(ok.validate(), Ok(()));
    let with = |f: fn(&mut TaskSpec)| {
        let mut s = ok.clone();
        f(&mut s);
        s.validate().unwrap_err()
    };
    assert_eq!(with(|s| s.argv.clear()), SpecError::EmptyArgv);
    assert_eq!(with(|s| s.argv[0].clear()), SpecError::EmptyProgram);
    assert_eq!(with(|s| s.argv.push("a\0b".into())), SpecError::Nul("argv[1]".into()));
    assert_eq!(with(|s| s.cwd = Some("rel".into())), SpecError::RelativeCwd("rel".into()));
    let e = with(|s| s.env.push(EnvVar { key: "A=B".into(), value: String::new() }));
    assert!(e.to_string().starts_with("env:"), "{e}");
    for bad in ["", "1BAD", "A B", "A=B", "A-B", "É"] {
        let mut s = ok.clone();
        s.env.push(EnvVar { key: bad.into(), value: String::new() });
        assert_eq!(s.validate(), Err(SpecError::BadEnvKey(bad.into())), "{bad:?}");
    }
    for good in ["A", "_x", "PATH_2"] {
        assert!(is_valid_env_name(good), "{good}");
    }
    assert!(check_cwd_exists("/").is_ok());
    let e = check_cwd_exists("/nonexistent/lardon-cwd").unwrap_err();
    assert!(e.to_string().starts_with("cwd:"), "{e}");
    assert_eq!(with(|s| s.items = Some(0)), SpecError::ZeroItems);
    assert_eq!(with(|s| s.name = "n".repeat(300)), SpecError::NameTooLong(MAX_NAME_CHARS));
}

#[test]
fn words_round_trip() {
    for st in STATES {
        assert_eq!(parse_state(st.as_str()).unwrap(), st);
    }
    for k in DECISION_KINDS {
        assert_eq!(parse_decision(k.as_str()).unwrap(), k);
    }
    assert!(parse_state("nope").is_err());
    assert!(parse_decision("nope").is_err());
    assert_eq!("42".parse::<TaskId>().unwrap(), TaskId(42));
    assert!("x".parse::<TaskId>().is_err());
}

#[test]
fn a_shippable_tasks_files_are_relative_plain_names_once_each_with_a_cwd() {
    let mut spec = TaskSpec::command(["cc", "-c", "x.c"]);
    spec.cwd = Some("/work".into());
    let files = |inputs: &[&str], outputs: &[&str]| Offload {
        capability: "gcc@12:*".into(),
        deadline_unix_ms: None,
        inputs: inputs.iter().map(|s| (*s).to_owned()).collect(),
        outputs: outputs.iter().map(|s| (*s).to_owned()).collect(),
    };
    spec.offload = Some(files(&["x.c", "inc/x.h"], &["x.o"]));
    assert_eq!(spec.validate(), Ok(()));
    for (inputs, outputs, field) in [
        (&["../x.c"][..], &[][..], "inputs[0]:"),
        (&["x.c", "/etc/passwd"][..], &[][..], "inputs[1]:"),
        (&["x.c", "x.c"][..], &[][..], "inputs[1]: `x.c` named twice"),
        (&[][..], &["/tmp/x.o"][..], "outputs[0]:"),
        (&[][..], &["a/./b"][..], "outputs[0]:"),
        (&[][..], &[""][..], "outputs[0]:"),
    ] {
        spec.offload = Some(files(inputs, outputs));
        let e = spec.validate().unwrap_err().to_string();
        assert!(e.starts_with(field), "{inputs:?} {outputs:?}: {e}");
    }
    spec.offload = Some(files(&["x.c"], &[]));
    spec.cwd = None;
    assert!(spec.validate().unwrap_err().to_string().starts_with("cwd:"));
}

#[test]
fn a_group_is_in_the_json_only_when_set_and_checked_when_read() {
    let mut spec = TaskSpec::command(["true"]);
    assert!(!serde_json::to_string(&spec).unwrap().contains("group"), "older specs read the same");
    spec.group = Some(lardon::GroupName::new("render.v2").unwrap());
    let json = serde_json::to_string(&spec).unwrap();
    assert!(json.contains(r#""group":"render.v2""#), "{json}");
    assert_eq!(serde_json::from_str::<TaskSpec>(&json).unwrap(), spec);
    let bad = serde_json::from_str::<TaskSpec>(r#"{"argv":["x"],"group":"a b"}"#).unwrap_err();
    assert!(bad.to_string().contains("group name `a b` is invalid"), "{bad}");
}
