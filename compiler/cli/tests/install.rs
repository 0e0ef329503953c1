//! A user's first hour, from outside the repository: `cargo install --path`
//! with a clean HOME and CARGO_HOME (so every dependency comes from the
//! registry, as on a fresh machine), then `ptec check` and `ptec bench` in
//! a directory of the user's own. Only the toolchains (RUSTUP_HOME) and
//! PATH are kept from this environment.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")).unwrap()
}

/// Where rustup keeps its toolchains, found before HOME changes.
fn rustup_home() -> PathBuf {
    if let Some(d) = std::env::var_os("RUSTUP_HOME") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").expect("HOME or RUSTUP_HOME");
    PathBuf::from(home).join(".rustup")
}

/// `program` run in `dir` with nothing of this environment but PATH and
/// the toolchains.
fn run_clean(program: &Path, args: &[&str], dir: &Path, home: &Path) -> Output {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUSTUP_HOME", rustup_home())
        .env("HOME", home)
        .env("CARGO_HOME", home.join(".cargo"))
        .output()
        .unwrap();
    let report = format!(
        "{} {args:?} in {}:\n{}{}",
        program.display(),
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    out
}

#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn installed_with_a_clean_home_check_and_bench_work_outside_the_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let root = tmp.path().join("root");
    let cli = repo().join("compiler/cli");
    // Built beside the repository's other targets so that a second run
    // reuses it; the dependencies' sources are the clean CARGO_HOME's.
    let build = repo().join("target/install-test");
    run_clean(
        Path::new("cargo"),
        &[
            "install",
            "--locked",
            "--path",
            cli.to_str().unwrap(),
            "--root",
            root.to_str().unwrap(),
            "--target-dir",
            build.to_str().unwrap(),
        ],
        &work,
        &home,
    );
    let ptec = root.join("bin").join(format!("ptec{}", std::env::consts::EXE_SUFFIX));
    assert!(ptec.is_file(), "cargo install made no {}", ptec.display());

    std::fs::copy(repo().join("tests/fixtures/mlp.bpte"), work.join("model.bpte")).unwrap();
    let out = run_clean(&ptec, &["check", "model.bpte"], &work, &home);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.lines().any(|l| l == "3 passed, 0 failed"), "{report}");

    let out = run_clean(
        &ptec,
        &["bench", "model.bpte", "--iters", "3", "--warmup", "1"],
        &work,
        &home,
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert!(report["median_us"].as_f64().is_some_and(|t| t > 0.0), "{line}");
    assert_eq!(report["iters"], 3, "{line}");

    // Nothing was written into the user's directory but their model.
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("model.bpte")]);
}
