//! Checks a committed set of bundles (the model fuzzer's seeds, the zoo's
//! default list): every one must compile and pass all its cases within its
//! own tolerance, except those listed as refused, which must be refused
//! with the listed text.
use ptec_cli::check::{check, CheckInput, CheckStatus};
use std::path::PathBuf;

/// One bundle of the set.
pub struct Listed {
    pub path: PathBuf,
    pub rtol: f64,
    pub atol: f64,
    /// How many cases it holds, when the list says.
    pub cases: Option<usize>,
    /// The text ptec's refusal must contain, for a bundle that is refused.
    pub refusal: Option<String>,
}

/// Checks every bundle on one thread; returns how many passed and how many
/// were refused as listed, or panics naming every bundle that did neither.
pub fn check_listed(what: &str, listed: &[Listed]) -> (usize, usize) {
    let inputs: Vec<CheckInput> = listed
        .iter()
        .map(|l| CheckInput {
            path: l.path.clone(),
            data: vec![],
            rtol: l.rtol,
            atol: l.atol,
            cases: None,
            winograd: true,
        })
        .collect();
    let results = check(&inputs, &[1], false, |m| eprintln!("{what}: {m}")).unwrap();
    assert_eq!(results.len(), inputs.len());
    let mut problems = Vec::new();
    let (mut passed, mut refused) = (0, 0);
    for (l, r) in listed.iter().zip(&results) {
        let file = l.path.file_name().unwrap().to_string_lossy();
        match (&r.status, &l.refusal) {
            (
                CheckStatus::Ran {
                    lines,
                    passed: p,
                    failed: f,
                },
                None,
            ) => {
                let all_ok = lines.iter().all(|line| line.ends_with(": ok"));
                if *f != 0 || *p == 0 || l.cases.is_some_and(|c| *p != c || lines.len() != c) || !all_ok {
                    problems.push(format!("{file}: {p} passed, {f} failed of {:?}: {lines:#?}", l.cases));
                } else {
                    passed += 1;
                }
            }
            (CheckStatus::Ran { .. }, Some(why)) => problems.push(format!(
                "{file}: compiled, but the list says ptec refuses it ({why}): update the list"
            )),
            (CheckStatus::NotCompiled(e), Some(why)) if e.contains(why.as_str()) => refused += 1,
            (CheckStatus::NotCompiled(e), Some(why)) => {
                problems.push(format!("{file}: refused, but not with `{why}`: {e}"))
            }
            (CheckStatus::NotCompiled(e), None) => problems.push(format!("{file}: not compiled: {e}")),
        }
    }
    println!("{what}: {passed} passed, {refused} refused as listed");
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(passed + refused, listed.len());
    (passed, refused)
}
