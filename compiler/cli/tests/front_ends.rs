//! The CLI, the build-script API and the macro expansion produce the same
//! code for the same file and the same options, because they call the same
//! function with options read by the same parser.
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    std::fs::canonicalize(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name),
    )
    .unwrap()
}

fn cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ptec {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The library's code for `file` (with `.ptd` files `data`), as every
/// front end names the files: by their absolute paths.
fn library(file: &Path, data: &[PathBuf], options: &ptec::Options) -> ptec::Output {
    let input = data
        .iter()
        .try_fold(ptec::Input::open(file).unwrap(), |i, d| i.open_data(d))
        .unwrap();
    ptec::compile(&input, options).unwrap()
}

/// One option, as each front end is given it.
struct Case {
    /// The fixture the option changes the code of.
    fixture: &'static str,
    /// The command line's flags.
    cli: &'static [&'static str],
    /// The macro's arguments after the path.
    macro_args: &'static str,
    /// The Builder's setters.
    builder: fn(ptec::Builder) -> ptec::Builder,
    /// The library's options.
    options: fn(ptec::Options) -> ptec::Options,
}

/// Every option, each on a fixture whose code it changes (the first case
/// is the defaults, on each fixture).
fn cases() -> Vec<Case> {
    let default = ptec::Tolerance::default();
    assert_eq!(
        (default.rtol, default.atol),
        (1e-4, 1e-5),
        "the cases below spell the defaults"
    );
    let mut cases: Vec<Case> = [
        "mlp.pte",
        "cond.bpte",
        "multi_method.pte",
        "dynamic.bpte",
        "conv.bpte",
        "xnnpack_conv.pte",
    ]
    .into_iter()
    .map(|fixture| Case {
        fixture,
        cli: &[],
        macro_args: "",
        builder: |b| b,
        options: |o| o,
    })
    .collect();
    cases.extend([
        Case {
            fixture: "mlp.pte",
            cli: &["--name", "Net"],
            macro_args: "name = Net",
            builder: |b| b.name("Net"),
            options: |o| o.name("Net"),
        },
        Case {
            fixture: "cond.bpte",
            cli: &["--tests"],
            macro_args: "tests",
            builder: |b| b.tests(1e-4, 1e-5),
            options: |o| o.tests(1e-4, 1e-5),
        },
        Case {
            fixture: "cond.bpte",
            cli: &["--rtol", "0.01", "--tests", "--atol", "0.002"],
            macro_args: "rtol = 0.01, tests, atol = 2e-3",
            builder: |b| b.tests(0.01, 0.002),
            options: |o| o.tests(0.01, 0.002),
        },
        Case {
            fixture: "conv.bpte",
            cli: &["--weights", "external"],
            macro_args: "weights = external",
            builder: |b| b.external_weights(true),
            options: |o| o.external_weights(true),
        },
        Case {
            fixture: "xnnpack_conv.pte",
            cli: &["--lower-xnnpack", "false"],
            macro_args: "lower_xnnpack = false",
            builder: |b| b.lower_xnnpack(false),
            options: |o| o.lower_xnnpack(false),
        },
        Case {
            fixture: "conv.bpte",
            cli: &["--channels-last=false"],
            macro_args: "channels_last = false",
            builder: |b| b.channels_last(false),
            options: |o| o.channels_last(false),
        },
        Case {
            fixture: "mlp.pte",
            cli: &["--trace", "true"],
            macro_args: "trace = true",
            builder: |b| b.trace(true),
            options: |o| o.trace(true),
        },
        Case {
            fixture: "winograd.pte",
            cli: &["--winograd", "false"],
            macro_args: "winograd = false",
            builder: |b| b.winograd(false),
            options: |o| o.winograd(false),
        },
    ]);
    cases
}

#[test]
fn cli_builder_and_macro_agree_on_every_option() {
    // conv and xnnpack_conv have filters the compiler prepares: the macro
    // and standard output embed them in the code, the Builder and `-o`
    // write them beside it.
    for case in cases() {
        let name = case.fixture;
        let what = format!("{name} with {:?}", case.cli);
        let path = fixture(name);
        let options = (case.options)(ptec::Options::new());
        let inline = library(&path, &[], &options);
        let inline_code = inline.to_source().unwrap();
        if !case.cli.is_empty() {
            let default = library(&path, &[], &ptec::Options::new()).to_source().unwrap();
            assert_ne!(inline_code, default, "{what}: the option changes nothing");
        }
        let from_cli = cli(&[&[path.to_str().unwrap(), "-o", "-"][..], case.cli].concat());
        assert_eq!(from_cli, inline_code, "{what}: CLI differs from the library");

        let dir = tempfile::tempdir().unwrap();
        let written = (case.builder)(ptec::Builder::new(&path))
            .out_dir(dir.path())
            .generate("out.rs")
            .unwrap();
        let beside = library(&path, &[], &options.clone().output_file("out.rs"));
        let beside_code = beside.to_source().unwrap();
        assert_eq!(
            std::fs::read_to_string(&written).unwrap(),
            beside_code,
            "{what}: Builder differs"
        );
        assert_eq!(inline.prepared(), beside.prepared(), "{what}: prepared data differs");
        let prepared = dir.path().join("out.prepared");
        if beside.prepared().is_empty() {
            assert!(!prepared.exists(), "{what}: an empty prepared file was written");
            assert_eq!(
                inline_code, beside_code,
                "{what}: the code depends on where nothing goes"
            );
        } else {
            assert_eq!(
                std::fs::read(&prepared).unwrap(),
                beside.prepared(),
                "{what}: prepared file"
            );
            assert!(beside_code.contains("include_bytes!(\"out.prepared\")"), "{what}");
            assert!(!inline_code.contains("out.prepared"), "{what}");
        }

        let fixtures_dir = path.parent().unwrap();
        let args: proc_macro2::TokenStream = format!("{name:?}, {}", case.macro_args).parse().unwrap();
        let expanded = ptec::expand_macro(args, fixtures_dir);
        let tracked = library(&path, &[], &options.clone().track_inputs(true));
        assert_eq!(
            expanded.to_string(),
            tracked.tokens().to_string(),
            "{what}: macro differs"
        );
        // Only the macro names its input, for Cargo to rebuild on a change.
        let named = format!("include_bytes ! ({:?})", path.display().to_string());
        assert!(
            expanded.to_string().contains(&named),
            "{what}: the macro does not name its file"
        );
        if !options_external(case.cli) {
            assert!(
                !inline_code.contains(".pte\")") && !inline_code.contains(".bpte\")"),
                "{what}"
            );
        }
    }
}

/// Whether the flags ask for external weights (the code then names the
/// program, to hand it to the program in its tests).
fn options_external(flags: &[&str]) -> bool {
    flags.windows(2).any(|w| w == ["--weights", "external"])
}

#[test]
fn front_ends_agree_on_data_files() {
    // The `.ptd` file's path is relative to the crate for the macro, to
    // the current directory for the CLI and the Builder.
    let (path, ptd) = (fixture("external_weights.pte"), fixture("external_weights.ptd"));
    let options = ptec::Options::new();
    let inline = library(&path, std::slice::from_ref(&ptd), &options);
    let from_cli = cli(&[path.to_str().unwrap(), "--data", ptd.to_str().unwrap()]);
    assert_eq!(from_cli, inline.to_source().unwrap(), "CLI differs");
    let dir = tempfile::tempdir().unwrap();
    let written = ptec::Builder::new(&path)
        .data(&ptd)
        .out_dir(dir.path())
        .generate("out.rs")
        .unwrap();
    let beside = library(
        &path,
        std::slice::from_ref(&ptd),
        &options.clone().output_file("out.rs"),
    );
    assert_eq!(
        std::fs::read_to_string(written).unwrap(),
        beside.to_source().unwrap(),
        "Builder differs"
    );
    let args = quote::quote!("external_weights.pte", data = ["external_weights.ptd"]);
    let expanded = ptec::expand_macro(args, path.parent().unwrap());
    let tracked = library(&path, &[ptd], &options.track_inputs(true));
    assert_eq!(expanded.to_string(), tracked.tokens().to_string(), "macro differs");
}

#[test]
fn front_ends_refuse_bad_options_with_the_same_words() {
    let path = fixture("mlp.pte");
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args([path.to_str().unwrap(), "--rtol", "tight"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let from_cli = String::from_utf8_lossy(&out.stderr);
    let expanded = ptec::expand_macro(quote::quote!("mlp.pte", rtol = tight), path.parent().unwrap()).to_string();
    let from_library = ptec::Options::new().set("rtol", Some("tight")).unwrap_err().to_string();
    assert!(from_cli.contains(&from_library), "{from_cli}");
    assert!(expanded.contains(&from_library), "{expanded}");
}

#[test]
fn output_is_deterministic() {
    let path = fixture("cond.pte");
    let a = cli(&[path.to_str().unwrap()]);
    let b = cli(&[path.to_str().unwrap()]);
    assert_eq!(a, b);
    assert!(a.starts_with("// @generated by ptec "), "{}", &a[..80]);
    assert!(a.contains("sha256 "));
}

#[test]
fn cli_output_is_self_contained_and_written_only_when_changed() {
    // With embedded weights the code and its constants beside it are all a
    // build needs: the code names no input file.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("src/model.rs");
    let input = fixture("conv.bpte");
    cli(&[input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let code = std::fs::read_to_string(&out).unwrap();
    assert_eq!(code.matches("include_bytes!").count(), 1, "{code}");
    assert!(code.contains("include_bytes!(\"model.prepared\")"));
    let constants = dir.path().join("src/model.prepared");
    let modified = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = (modified(&out), modified(&constants));
    std::thread::sleep(std::time::Duration::from_millis(20));
    cli(&[input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(
        (modified(&out), modified(&constants)),
        before,
        "rewritten although unchanged"
    );
}

#[test]
fn cli_names_input_files_relative_to_the_output() {
    // In external-weights mode the generated tests embed the bundle, to
    // hand it to the program.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("src/model.rs");
    let input = fixture("cond.bpte");
    let args = ["--weights", "external", "--tests", "-o", out.to_str().unwrap()];
    cli(&[&[input.to_str().unwrap()][..], &args].concat());
    let code = std::fs::read_to_string(&out).unwrap();
    let rel = pathdiff(out.parent().unwrap(), &input);
    assert!(
        code.contains(&format!("include_bytes!({rel:?})")),
        "include path not relative: {rel}"
    );
}

/// `to` relative to `from` (both absolute).
fn pathdiff(from: &Path, to: &Path) -> String {
    let from = std::fs::canonicalize(from).unwrap();
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut p = PathBuf::new();
    for _ in common..f.len() {
        p.push("..");
    }
    for c in &t[common..] {
        p.push(c);
    }
    p.display().to_string()
}

#[test]
fn errors_name_the_problem() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args(["inspect", "Cargo.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("not an ExecuTorch"), "{err}");
}
