//! A temporary binary crate that builds generated modules against the
//! repository's `ptec-runtime`: what `ptec check` and `ptec bench` run.
//!
//! The crate itself lives in a temporary directory, but its target
//! directory persists between runs, so the runtime and kernels are built
//! once and later runs compile only the generated code.
use ptec::{ErrorKind, Errors, Location, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The ptec source tree this binary was built from (present for a build
/// in the repository, `cargo install --path` and `--git`; absent for an
/// install from crates.io).
pub(crate) fn source_tree() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `ptec-runtime` the runner crate builds against: the
/// `PTEC_RUNTIME_SOURCE` directory, or the registry's release of this
/// version when that is `registry`; else the runtime in the source tree,
/// or the registry's when there is none.
enum RuntimeSource {
    Path(PathBuf),
    Registry,
}

fn runtime_source() -> RuntimeSource {
    match std::env::var_os("PTEC_RUNTIME_SOURCE") {
        Some(v) if v == "registry" => RuntimeSource::Registry,
        Some(dir) => RuntimeSource::Path(absolute(Path::new(&dir))),
        None => {
            let dir = source_tree().join("runtime-min");
            if dir.join("Cargo.toml").is_file() {
                RuntimeSource::Path(absolute(&dir))
            } else {
                RuntimeSource::Registry
            }
        }
    }
}

/// The kernels' sources the runner builds (beside the runtime's), when
/// they are on disk.
pub(crate) fn kernels_source() -> Option<PathBuf> {
    match runtime_source() {
        RuntimeSource::Path(runtime) => Some(runtime.join("../kernels/src")).filter(|d| d.is_dir()),
        RuntimeSource::Registry => None,
    }
}

/// Cargo's home (`$CARGO_HOME`, else `~/.cargo`): the sources of crates
/// cargo installed live under it.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".cargo")))
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The user's cache directory for ptec (`$XDG_CACHE_HOME/ptec`, or
/// `~/.cache/ptec`; `~/Library/Caches/ptec` on macOS,
/// `%LOCALAPPDATA%\ptec` on Windows).
pub(crate) fn user_cache_dir() -> Option<PathBuf> {
    if cfg!(windows) {
        return std::env::var_os("LOCALAPPDATA").map(|d| PathBuf::from(d).join("ptec"));
    }
    if cfg!(target_os = "macos") {
        return home().map(|h| h.join("Library/Caches/ptec"));
    }
    match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(d) => Some(PathBuf::from(d).join("ptec")),
        None => home().map(|h| h.join(".cache/ptec")),
    }
}

static TARGET_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes the runners build in `dir` (the command line's `--target-dir`).
pub fn set_target_dir(dir: PathBuf) {
    let _ = TARGET_DIR.set(dir);
}

/// The persistent target directory the runner crates build in:
/// `--target-dir` ([`set_target_dir`]), else `$env_var`, else `name` under
/// `CARGO_TARGET_DIR`; else under the source tree's `target` when this
/// binary was built from a checkout of the user's own, and under the
/// user's cache directory when cargo installed it (its sources are
/// cargo's, maybe read-only).
pub fn target_dir(env_var: &str, name: &str) -> PathBuf {
    if let Some(d) = TARGET_DIR.get() {
        return d.clone();
    }
    if let Some(d) = std::env::var_os(env_var) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d).join(name);
    }
    default_target_dir(
        name,
        &absolute(&source_tree()),
        cargo_home().as_deref(),
        user_cache_dir(),
    )
}

/// `name` under `tree`'s `target` when `tree` is a source tree outside
/// `cargo_home`, else under `cache` (or the temporary directory).
fn default_target_dir(name: &str, tree: &Path, cargo_home: Option<&Path>, cache: Option<PathBuf>) -> PathBuf {
    let installed = cargo_home.is_none_or(|h| tree.starts_with(absolute(h)));
    if tree.join("Cargo.toml").is_file() && !installed {
        return tree.join("target").join(name);
    }
    match cache {
        Some(d) => d.join(name),
        None => std::env::temp_dir().join("ptec").join(name),
    }
}

/// `p` made absolute when it exists (generated `include_bytes!` paths must
/// not depend on the temporary crate's location).
pub fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Opens the program `path` with its `.ptd` files `data`, for a runner
/// (`tool` names the command, `instead` says what to do with a program
/// that needs backends from the user); errors name the file.
pub fn open_program(
    path: &Path,
    data: &[PathBuf],
    tool: &str,
    instead: &str,
) -> std::result::Result<ptec::Input<'static>, String> {
    let shown = path.display();
    let input = ptec::Input::open(absolute(path))
        .and_then(|p| data.iter().try_fold(p, |p, d| p.open_data(d)))
        .map_err(|e| e.to_string())?;
    refuse_user_backends(&input, tool, instead).map_err(|e| format!("{shown}: {e}"))?;
    Ok(input)
}

/// Fails for a program whose delegates need backends from the user: the
/// runner crate has none to give (`tool` names the command, `instead` says
/// what to do).
pub fn refuse_user_backends(input: &ptec::Input<'_>, tool: &str, instead: &str) -> Result<()> {
    let bytes = input.program_bytes();
    let mut loaded = ptec::load(bytes, &input.data_bytes())?;
    // Delegates ptec compiles itself need no user backend.
    ptec::lower_delegates(&mut loaded, &ptec::Options::new())?;
    match loaded.program.iter().flat_map(|p| p.backend_ids()).next() {
        Some(id) => Err(Errors::one(
            ErrorKind::Unsupported {
                detail: format!(
                    "the program calls backend `{id}` through a DelegateCall; ptec {tool} has no user backends to give it ({instead})"
                ),
            },
            Location::default(),
        )),
        None => Ok(()),
    }
}

/// The temporary crate: a package `name` whose `src/main.rs` and modules
/// the caller writes.
pub struct RunnerCrate {
    dir: tempfile::TempDir,
    name: &'static str,
    /// Build without the network: the runtime is a path dependency.
    offline: bool,
}

impl RunnerCrate {
    /// Creates the crate with the given `[profile.release]` settings (TOML
    /// lines).
    pub fn new(name: &'static str, release_profile: &str) -> std::result::Result<Self, String> {
        // `bench` for `ptec bench`'s executables; `ptec check`'s take it
        // too, so a target directory they share builds one runtime.
        Self::with_runtime(name, release_profile, "features = [\"bench\"]")
    }

    /// [`RunnerCrate::new`] with `runtime` (TOML: the features of the
    /// `ptec-runtime` dependency) in place of `bench`'s.
    pub fn with_runtime(name: &'static str, release_profile: &str, runtime: &str) -> std::result::Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .tempdir()
            .map_err(|e| format!("temporary crate: {e}"))?;
        std::fs::create_dir_all(dir.path().join("src")).map_err(|e| e.to_string())?;
        let source = runtime_source();
        let (dependency, offline) = match &source {
            RuntimeSource::Path(dir) => (format!("path = {:?}", dir.display().to_string()), true),
            RuntimeSource::Registry => (format!("version = \"={}\"", env!("CARGO_PKG_VERSION")), false),
        };
        let manifest = format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[dependencies]\nptec-runtime = {{ {dependency}, {runtime} }}\n\n[profile.release]\n{release_profile}\n\n[workspace]\n"
        );
        std::fs::write(dir.path().join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
        // The source tree's lock file pins the runtime's dependencies, so an
        // offline build finds them.
        if let RuntimeSource::Path(runtime) = source {
            let lock = runtime.join("../Cargo.lock");
            if lock.exists() {
                let _ = std::fs::copy(&lock, dir.path().join("Cargo.lock"));
            }
        }
        Ok(RunnerCrate { dir, name, offline })
    }

    /// Writes `src/<file>`.
    pub fn write(&self, file: &str, contents: &str) -> std::result::Result<(), String> {
        let path = self.dir.path().join("src").join(file);
        std::fs::write(&path, contents).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes generated code as `src/file`, with its prepared constants
    /// beside it (compiled with [`ptec::Options::output_file`]`(file)`).
    pub fn write_source(&self, file: &str, source: &ptec::Output) -> std::result::Result<(), String> {
        let path = self.dir.path().join("src").join(file);
        source.write(&path).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Builds the executable in release mode into `target` and returns the
    /// path of a copy of it in this crate's directory. `rustflags`, when
    /// given, replace the environment's flags (they are part of what
    /// `target` caches, so keep one target per set).
    ///
    /// Runs of ptec at the same time share `target`, where each builds an
    /// executable of the same name: a lock held from the build to the copy
    /// keeps one from running another's program.
    ///
    /// Cargo hashes a path package by its path relative to its workspace,
    /// so every runner crate of a name shares one fingerprint: a crate
    /// whose files are older than another's last build would be taken as
    /// built. Its fingerprint is removed first, so the crate is always
    /// compiled (the dependencies stay cached).
    pub fn build(&self, target: &Path, rustflags: Option<&str>, verbose: bool) -> std::result::Result<PathBuf, String> {
        self.build_for(target, None, rustflags, verbose)
    }

    /// [`RunnerCrate::build`] for the target triple `triple` (default: the
    /// host).
    pub fn build_for(
        &self,
        target: &Path,
        triple: Option<&str>,
        rustflags: Option<&str>,
        verbose: bool,
    ) -> std::result::Result<PathBuf, String> {
        std::fs::create_dir_all(target).map_err(|e| format!("{}: {e}", target.display()))?;
        let lock_path = target.join(".ptec-build.lock");
        let lock = std::fs::File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
        lock.lock()
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        let fingerprints = triple
            .map_or(target.to_path_buf(), |t| target.join(t))
            .join("release/.fingerprint");
        let prefix = format!("{}-", self.name);
        for entry in std::fs::read_dir(&fingerprints).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|e| format!("removing {}: {e}", entry.path().display()))?;
            }
        }
        let built = self.build_locked(target, triple, rustflags, verbose)?;
        let copy = self.dir.path().join(built.file_name().unwrap_or(self.name.as_ref()));
        std::fs::copy(&built, &copy).map_err(|e| format!("copying {}: {e}", built.display()))?;
        Ok(copy)
    }

    fn build_locked(
        &self,
        target: &Path,
        triple: Option<&str>,
        rustflags: Option<&str>,
        verbose: bool,
    ) -> std::result::Result<PathBuf, String> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let run = |offline: bool| -> std::result::Result<std::process::Output, String> {
            let mut cmd = Command::new(&cargo);
            cmd.args(["build", "--release", "--quiet"]);
            if offline {
                cmd.arg("--offline");
            }
            if let Some(t) = triple {
                cmd.args(["--target", t]);
            }
            cmd.arg("--manifest-path")
                .arg(self.dir.path().join("Cargo.toml"))
                .env("CARGO_TARGET_DIR", target)
                .stdout(Stdio::null())
                .stderr(if verbose { Stdio::inherit() } else { Stdio::piped() });
            if let Some(flags) = rustflags {
                // The encoded form takes precedence over RUSTFLAGS.
                let encoded: Vec<&str> = flags.split_whitespace().collect();
                cmd.env("CARGO_ENCODED_RUSTFLAGS", encoded.join("\x1f"));
            }
            cmd.output().map_err(|e| format!("running cargo: {e}"))
        };
        let mut out = run(self.offline)?;
        // The source tree's lock file may pin versions this cargo home has
        // not downloaded (`cargo install` resolves afresh): then online.
        if self.offline && !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--offline") {
            out = run(false)?;
        }
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("ptec-runtime") || err.contains("failed to download") || err.contains("--offline") {
                return Err(format!(
                    "building the runner needs ptec-runtime {v} and its dependencies (from ptec's source tree \
                     or crates.io), and cargo could not get them (with the network once, they stay cached; or \
                     set PTEC_RUNTIME_SOURCE to a source directory of ptec-runtime {v}); cargo said:\n{err}",
                    v = env!("CARGO_PKG_VERSION")
                ));
            }
            return Err(format!("building the generated code failed:\n{err}"));
        }
        let dir = match triple {
            Some(t) => target.join(t).join("release"),
            None => target.join("release"),
        };
        // A target whose executables have an extension (wasm, Windows).
        let exe = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.is_file()
                    && p.file_stem().is_some_and(|s| s == self.name)
                    && p.extension().is_some_and(|e| e == "wasm" || e == "exe")
            });
        Ok(exe.unwrap_or_else(|| dir.join(self.name)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn installed_copies_cache_their_runners_in_the_users_cache() {
        use super::default_target_dir;
        let work = tempfile::tempdir().unwrap();
        let (home, tree) = (work.path().join("home"), work.path().join("src/ptec"));
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("Cargo.toml"), "[workspace]\n").unwrap();
        let cache = Some(home.join(".cache/ptec"));
        let tree = super::absolute(&tree);
        // A checkout of the user's own: its target directory.
        let cargo_home = home.join(".cargo");
        assert_eq!(
            default_target_dir("x", &tree, Some(&cargo_home), cache.clone()),
            tree.join("target/x")
        );
        // `cargo install --git`: the sources are cargo's.
        assert_eq!(
            default_target_dir("x", &tree, Some(work.path()), cache.clone()),
            home.join(".cache/ptec/x")
        );
        // From crates.io: no source tree.
        let gone = work.path().join("registry/ptec-cli-0.1.0/../..");
        assert_eq!(
            default_target_dir("x", &gone, Some(&cargo_home), cache),
            home.join(".cache/ptec/x")
        );
        assert!(default_target_dir("x", &gone, None, None).ends_with("ptec/x"));
    }

    use super::*;

    #[test]
    fn a_crate_older_than_another_of_its_name_is_still_built() {
        // Crate `a` is written first, `b` later and built first: `a`'s
        // files are older than the executable in the shared target, and
        // `a` must still run its own program.
        let target = target_dir("PTEC_CHECK_TARGET_DIR", "ptec-check");
        let program = |answer: u32| format!("fn main() {{ println!(\"{answer}\"); }}\n");
        let a = RunnerCrate::new("ptec-runner-crate-test", "").unwrap();
        a.write("main.rs", &program(1)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = RunnerCrate::new("ptec-runner-crate-test", "").unwrap();
        b.write("main.rs", &program(2)).unwrap();
        for (krate, answer) in [(&b, "2"), (&a, "1")] {
            let exe = krate.build(&target, None, false).unwrap();
            let out = Command::new(exe).output().unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), answer);
        }
    }
}
