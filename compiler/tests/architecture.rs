//! The compiler's production modules import each other without cycles: each
//! stage uses the ones before it. Checked from the source: every
//! `crate::…`, `super::…` and `self::…` path outside test code names the
//! module it reaches; a module using its own ancestor or descendant does
//! not count (a parent and its children are one room).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of `src` (as `a::b`, the root as ``) and its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.file_name().unwrap() == "tests.rs" {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The production code of a file: comments dropped, and every test module
/// (`#[cfg(test)]` or `#[cfg(all(test, …))]` before `mod name {`) cut out up
/// to its closing brace.
fn production(text: &str) -> String {
    let code: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = code.as_str();
    while let Some(at) = ["#[cfg(test)]", "#[cfg(all(test"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
    {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let is_module = after
            .find(']')
            .map(|e| after[e + 1..].trim_start())
            .is_some_and(|t| t.starts_with("mod ") || t.starts_with("pub(crate) mod "));
        let Some(open) = after.find('{').filter(|_| is_module) else {
            out.push_str(&after[..1]);
            rest = &after[1..];
            continue;
        };
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The paths a `crate::`/`super::`/`self::` reference at `rest` spells out,
/// with `use` groups (`a::{b, c::d}`) expanded.
fn expand(rest: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let head: String = rest.chars().take_while(|&c| ident(c)).collect();
    let after = &rest[head.len()..];
    if !head.ends_with("::") || !after.starts_with('{') {
        return vec![head.trim_end_matches(':').to_string()];
    }
    // A group: split at top-level commas up to the matching brace.
    let (mut depth, mut items, mut start) = (0, Vec::new(), 1);
    for (i, c) in after.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    items.push(&after[start..i]);
                    break;
                }
            }
            ',' if depth == 1 => {
                items.push(&after[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .flat_map(|item| expand(item).into_iter().map(|p| format!("{head}{p}")))
        .collect()
}

/// The longest known module `path` (relative to the crate root) lies in.
fn resolve(path: &[&str], known: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| known.contains_key(m))
}

fn related(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| y.is_empty() || x == y || x.starts_with(&format!("{y}::"));
    inside(a, b) || inside(b, a)
}

/// The module import graph of a crate's production code.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(src);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &known {
        let code = production(&std::fs::read_to_string(file).unwrap());
        let here: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let targets = edges.entry(module.clone()).or_default();
        for (kw, base) in [
            ("crate::", Vec::new()),
            ("super::", here[..here.len().saturating_sub(1)].to_vec()),
            ("self::", here.clone()),
        ] {
            for (i, _) in code.match_indices(kw) {
                let before = code[..i].chars().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                for p in expand(&code[i + kw.len()..]) {
                    let mut full = base.clone();
                    for seg in p.split("::").filter(|s| !s.is_empty() && *s != "self") {
                        if seg == "super" {
                            full.pop();
                        } else {
                            full.push(seg);
                        }
                    }
                    if let Some(t) = resolve(&full, &known) {
                        if !related(module, &t) {
                            targets.insert(t);
                        }
                    }
                }
            }
        }
    }
    edges
}

/// The cycles of `edges`, each as the modules on it (one per strongly
/// connected component with more than one module).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for t in edges.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    stack.push(t.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    for m in edges.keys() {
        let component: Vec<String> = edges
            .keys()
            .filter(|o| *o != m && reaches[m].contains(*o) && reaches[*o].contains(m))
            .chain(std::iter::once(m))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if component.len() > 1 && !found.contains(&component) {
            found.push(component);
        }
    }
    found
}

#[test]
fn production_modules_import_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in [root.join("src"), root.join("cli/src"), root.join("../kernels/src")] {
        let edges = graph(&src);
        assert!(edges.len() > 3, "{}: no modules found", src.display());
        let found = cycles(&edges);
        assert!(found.is_empty(), "{}: import cycles among {found:?}", src.display());
    }
}

/// The checker itself finds a cycle, through a `use` group and `super::`.
#[test]
fn the_checker_sees_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod c;\n").unwrap();
    std::fs::write(src.join("a/mod.rs"), "pub mod b;\nuse crate::c::{x, y::z};\n").unwrap();
    std::fs::write(src.join("a/b.rs"), "use super::super::c;\n").unwrap();
    std::fs::write(
        src.join("c.rs"),
        "// crate::a is only mentioned here\nfn f() { crate::a::b::g(); }\n",
    )
    .unwrap();
    let edges = graph(src);
    assert_eq!(cycles(&edges), vec![vec!["a::b".to_string(), "c".to_string()]]);
    std::fs::write(
        src.join("c.rs"),
        "fn f() {}\n#[cfg(test)]\nmod tests { use crate::a; }\n",
    )
    .unwrap();
    assert!(cycles(&graph(src)).is_empty());
}

/// The compiler's stages, in the order `compile` runs them: a stage may use
/// the ones before it, never one after.
const STAGES: [&str; 6] = ["read", "verify", "passes", "plan", "codegen", "format"];

/// Modules every stage may use (the vocabulary below them all) and that use
/// no stage themselves.
const SHARED: [&str; 5] = ["ir", "error", "names", "options", "analysis"];

/// The edges of `edges` that break the stage order: a stage using a later
/// one, or shared vocabulary using a stage.
fn out_of_order(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    let rank = |m: &str| STAGES.iter().position(|s| *s == top(m));
    let mut bad = Vec::new();
    for (from, targets) in edges {
        for to in targets {
            let wrong = match (rank(from), rank(to)) {
                (Some(a), Some(b)) => b > a,
                (None, Some(_)) => SHARED.contains(&top(from).as_str()),
                _ => false,
            };
            if wrong {
                bad.push((from.clone(), to.clone()));
            }
        }
    }
    bad
}

#[test]
fn stages_use_only_earlier_stages() {
    let edges = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for stage in STAGES {
        assert!(edges.contains_key(stage), "no module `{stage}`");
    }
    let bad = out_of_order(&edges);
    assert!(bad.is_empty(), "imports against the stage order (from, to): {bad:#?}");
}

/// Code generation runs once, on the plan: only the plan compacts the data,
/// from the reads it predicts (`plan::reads`), and `codegen` generates its
/// methods in one call, without a generation that only records reads.
#[test]
fn code_is_generated_once_from_the_plan() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, file) in modules(&src) {
        let code = production(&std::fs::read_to_string(file).unwrap());
        if module != "plan" && !module.starts_with("plan::") {
            assert!(!code.contains("compact("), "{module} compacts data: only the plan does");
            assert!(
                !code.contains("reads::predict"),
                "{module} predicts reads: only the plan does"
            );
        }
        if module == "codegen" {
            // Its definition and one call.
            assert_eq!(
                code.matches("generate_methods(").count(),
                2,
                "codegen generates more than once"
            );
            assert!(!code.contains("reads.take()"), "codegen uses the reads of a generation");
            assert!(
                code.contains("check_reads("),
                "codegen no longer checks its reads against the plan"
            );
        }
    }
}

/// After `read`, no stage is handed the files: they take what `read` made
/// (`Loaded`, whose `Files` give the bytes of a data reference's file, and
/// the `Plan`), so no function of theirs takes the `.ptd` files' bytes or
/// the program's as a parameter.
#[test]
fn no_stage_after_read_takes_the_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, file) in modules(&src) {
        let top = module.split("::").next().unwrap_or("");
        if !["passes", "plan", "codegen", "format"].contains(&top) {
            continue;
        }
        let code = production(&std::fs::read_to_string(file).unwrap());
        for file_param in ["&[&[u8]]", "program_bytes", "bytes: &[u8], data"] {
            assert!(!code.contains(file_param), "{module} takes the files (`{file_param}`)");
        }
    }
}

/// What in `code`, production code of `module`, parses a file's bytes
/// after `read` did: the flatbuffer bindings, or the XNNPACK blob reader
/// run again; in `passes`, which take the subgraphs `read` made, also a
/// delegate's blob or the files at all.
fn parses_after_read(module: &str, code: &str) -> Vec<&'static str> {
    let top = module.split("::").next().unwrap_or("");
    if !["passes", "plan", "codegen", "format"].contains(&top) {
        return Vec::new();
    }
    let mut found: Vec<&'static str> = ["ptec_schema", "flatbuffers::", "Graphs::read", "read_delegates"]
        .into_iter()
        .filter(|p| code.contains(p))
        .collect();
    if top == "passes" {
        found.extend(
            [".processed", ".files", "Files"]
                .into_iter()
                .filter(|p| code.contains(p)),
        );
    }
    found
}

/// `read` parses every file, XNNPACK blobs included (`Loaded` holds each
/// delegate call's subgraph): no later stage parses a flatbuffer or reads
/// the XNNPACK blob again, and the lowering is handed subgraphs, never a
/// blob's bytes.
#[test]
fn only_read_parses_files_and_blobs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    for (module, file) in modules(&src) {
        let code = production(&std::fs::read_to_string(file).unwrap());
        let found = parses_after_read(&module, &code);
        assert!(found.is_empty(), "{module} parses what `read` parsed: {found:?}");
        checked += usize::from(module.starts_with("passes::xnnpack"));
    }
    assert!(checked >= 2, "the XNNPACK lowering's modules were not found");
    // The check sees a pass that reads a blob out of the files, and allows
    // the read stage to.
    let reader = "fn lower(l: &Loaded) { let b = l.files.bytes(d.processed.source); fb::root_as(b, ptec_schema::x); }";
    assert_eq!(
        parses_after_read("passes::xnnpack::lower", reader),
        ["ptec_schema", ".processed", ".files"]
    );
    assert_eq!(
        parses_after_read("codegen::ops", "ptec_schema::xnnpack"),
        ["ptec_schema"]
    );
    assert!(parses_after_read("read::xnnpack", reader).is_empty());
}
