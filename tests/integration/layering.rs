//! The crate's layering, checked on the source text so that it cannot erode unnoticed.
//!
//! The pure layers (`model`, `apis`, `scheduling`, `disruption`) are a crate of their own,
//! `crates/core`, whose manifest names no dependency that does I/O; the checks below read both
//! crates' sources, so the clock and `std::fs` stay out of it too.
//!
//! The modules form layers: model ← apis ← {catalog, scheduling, disruption} ← state ← operator ←
//! {cloud, controllers, sim}; `bench.rs`, `bench_disruption.rs`, `bench_overlays.rs` and `main.rs` sit on
//! top. A module may name `crate::X` only for the X in its row of [`LAYERS`]. The pure modules ([`PURE`])
//! must also not name I/O, async runtimes, Kubernetes clients, process state or the clock: decisions
//! there have to be reproducible from their inputs alone (the simulator and the tests rely on it).
//!
//! The check reads code, not comments or string literals, and understands grouped imports
//! (`use crate::{a, b::{c, d}}`) as well as paths written inline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each layered module and the modules it may use (besides itself).
const LAYERS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("apis", &["model"]),
    // Catalog and scheduling are peers and must not import each other: the solver gets instance types
    // through the model, never from the code that fetches them.
    ("catalog", &["model", "apis"]),
    ("scheduling", &["model", "apis"]),
    // Disruption decides by running the solver, so it may use scheduling; it stays pure, so not catalog.
    ("disruption", &["model", "apis", "scheduling"]),
    ("state", &["model", "apis", "catalog", "scheduling", "disruption"]),
    // Settings, metrics and leader election: used by the cloud provider and the controllers.
    ("operator", &["model", "apis", "catalog", "scheduling", "disruption", "state"]),
    ("cloud", &["model", "apis", "catalog", "scheduling", "disruption", "state", "operator"]),
    ("sim", &["model", "apis", "catalog", "scheduling", "disruption", "state", "operator"]),
    // The controllers drive the cloud provider; the provider never calls back into a controller.
    ("controllers", &["model", "apis", "catalog", "scheduling", "disruption", "state", "operator", "cloud"]),
];

/// Entries of `src/` above every layer (they may use anything).
const TOP: &[&str] = &["lib.rs", "main.rs", "bench.rs", "bench_disruption.rs", "bench_overlays.rs"];

/// Modules that must stay free of I/O and the clock: the core crate's decision layers, and the catalog
/// and the cluster index, whose fetching and watching are the Azure provider's and the controllers'.
const PURE: &[&str] = &["model", "scheduling", "disruption", "catalog", "state"];

/// Path prefixes a pure module may not name, with why.
const FORBIDDEN_PREFIXES: &[(&[&str], &str)] = &[
    (&["tokio"], "the async runtime"),
    (&["reqwest"], "an HTTP client"),
    (&["hyper"], "an HTTP stack"),
    (&["hyper_util"], "an HTTP stack"),
    (&["kube", "Client"], "the Kubernetes client"),
    (&["kube", "client"], "the Kubernetes client"),
    (&["kube", "Api"], "the Kubernetes API"),
    (&["kube", "api"], "the Kubernetes API"),
    (&["kube", "runtime"], "the Kubernetes controller runtime"),
    (&["std", "fs"], "the file system"),
    (&["std", "env"], "the process environment"),
    (&["std", "process"], "the process"),
    (&["chrono"], "the clock"),
];

/// Path segments anywhere in a path that read the clock.
const CLOCK_READS: &[[&str; 2]] = &[
    ["SystemTime", "now"],
    ["Instant", "now"],
    ["Utc", "now"],
    ["Local", "now"],
    ["Timestamp", "now"],
    ["Zoned", "now"],
    ["OffsetDateTime", "now_utc"],
    ["OffsetDateTime", "now_local"],
];

#[derive(Debug, PartialEq, Eq)]
struct Violation {
    line: usize,
    path: String,
    rule: String,
}

/// `code` with comments removed and the contents of string and char literals blanked, newlines kept
/// so that line numbers still match.
fn strip_comments_and_strings(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char_before(&chars, i) {
            // A raw string: r"..." or r#"..."#, possibly b-prefixed (the b was copied already).
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push('"');
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A char literal ('x' or an escape); a lifetime has no closing quote and is copied.
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokenize(code: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = vec![];
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push((Token::Ident(chars[start..i].iter().collect()), line));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push((Token::PathSep, line));
            i += 2;
        } else {
            let token = match c {
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                _ => Token::Other,
            };
            tokens.push((token, line));
            i += 1;
        }
    }
    tokens
}

/// Every path the code names, with the line it starts on; grouped imports are expanded.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let tokens = tokenize(code);
    let mut out = vec![];
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].0 {
            Token::Ident(_) | Token::PathSep => {
                let line = tokens[i].1;
                i = parse_path(&tokens, i, vec![], line, &mut out);
            }
            _ => i += 1,
        }
    }
    out
}

/// Parses `a::b::{c, d::e}` from `tokens[i]`, pushing each full path; returns the index after it.
fn parse_path(
    tokens: &[(Token, usize)],
    mut i: usize,
    mut prefix: Vec<String>,
    line: usize,
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    if tokens.get(i).map(|t| &t.0) == Some(&Token::PathSep) {
        i += 1;
    }
    loop {
        match tokens.get(i).map(|t| &t.0) {
            Some(Token::Ident(name)) => {
                prefix.push(name.clone());
                i += 1;
            }
            Some(Token::Open) if !prefix.is_empty() => {
                i += 1;
                loop {
                    match tokens.get(i).map(|t| &t.0) {
                        Some(Token::Close) => return i + 1,
                        Some(Token::Comma) => i += 1,
                        Some(Token::Ident(_)) => {
                            let item_line = tokens[i].1;
                            i = parse_path(tokens, i, prefix.clone(), item_line, out);
                        }
                        None => return i,
                        Some(_) => i += 1,
                    }
                }
            }
            _ => {
                out.push((line, prefix));
                return i;
            }
        }
        if tokens.get(i).map(|t| &t.0) == Some(&Token::PathSep) {
            i += 1;
        } else {
            out.push((line, prefix));
            return i;
        }
    }
}

/// The violations in the source of one file of `module`, `depth` modules below the crate root.
fn check_source(module: &str, depth: usize, pure: bool, source: &str) -> Vec<Violation> {
    let allowed = LAYERS.iter().find(|(m, _)| *m == module).map(|(_, a)| *a);
    let code = strip_comments_and_strings(source);
    let mut violations = vec![];
    for (line, path) in paths(&code) {
        let text = path.join("::");
        if pure {
            let seg = |k: usize| path.get(k).map(String::as_str);
            for (prefix, what) in FORBIDDEN_PREFIXES {
                if path.len() >= prefix.len() && path.iter().zip(prefix.iter()).all(|(a, b)| a == b) {
                    violations.push(Violation {
                        line,
                        path: text.clone(),
                        rule: format!("{module} is pure and may not use {what}"),
                    });
                }
            }
            // A path into an Azure SDK crate (`azure_core::…`), not an item that merely starts with
            // the word (`azure_regions()`).
            if path.len() > 1 && seg(0).is_some_and(|s| s.starts_with("azure_")) {
                violations.push(Violation {
                    line,
                    path: text.clone(),
                    rule: format!("{module} is pure and may not use the Azure SDK"),
                });
            }
            if path.windows(2).any(|w| CLOCK_READS.iter().any(|r| w[0] == r[0] && w[1] == r[1])) {
                violations.push(Violation {
                    line,
                    path: text.clone(),
                    rule: format!("{module} is pure and may not read the clock (take the time as an input)"),
                });
            }
        }
        let Some(allowed) = allowed else { continue };
        // Resolve `crate::X`, `karpenter_azure::X` and `super::...` chains that climb to the root.
        let supers = path.iter().take_while(|s| *s == "super").count();
        let target = match path.first().map(String::as_str) {
            Some("crate") | Some("karpenter_azure") => path.get(1),
            Some("super") if supers >= depth => path.get(supers),
            _ => None,
        };
        let Some(target) = target else { continue };
        if target == module || allowed.contains(&target.as_str()) {
            continue;
        }
        if LAYERS.iter().any(|(m, _)| m == target) || TOP.contains(&format!("{target}.rs").as_str()) {
            let rule = if allowed.is_empty() {
                format!("{module} is the bottom layer and may not use any other module")
            } else {
                format!("{module} may use only {}", allowed.join(", "))
            };
            violations.push(Violation { line, path: text, rule });
        }
    }
    violations
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).expect("readable source dir").map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The pure core crate's sources: `model`, `apis`, `scheduling` and `disruption` live there (`apis` in
/// part: its file I/O is in the main crate), re-exported by the main crate under the same names.
fn core_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/core/src")
}

/// Violations per file, over every layered module, in both crates.
fn crate_violations() -> BTreeMap<String, Vec<Violation>> {
    let mut all = BTreeMap::new();
    for root in [src(), core_src()] {
        all.extend(violations_under(&root));
    }
    all
}

/// Violations per file under one crate's source root.
fn violations_under(root: &Path) -> BTreeMap<String, Vec<Violation>> {
    let mut all = BTreeMap::new();
    let crate_dir = root.parent().unwrap().strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().to_path_buf();
    for (module, _) in LAYERS {
        let dir = root.join(module);
        let mut files = vec![];
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let single = root.join(format!("{module}.rs"));
        if single.is_file() {
            files.push(single);
        }
        for file in files {
            let relative = file.strip_prefix(root).unwrap();
            let mut depth = relative.components().count();
            if relative.file_name().is_some_and(|n| n == "mod.rs") {
                depth -= 1;
            }
            let source = std::fs::read_to_string(&file).unwrap();
            let found = check_source(module, depth, PURE.contains(module), &source);
            if !found.is_empty() {
                all.insert(crate_dir.join("src").join(relative).display().to_string(), found);
            }
        }
    }
    all
}

#[test]
fn every_module_keeps_to_its_layer_and_pure_modules_stay_pure() {
    let violations = crate_violations();
    let report: Vec<String> = violations
        .iter()
        .flat_map(|(file, list)| {
            list.iter().map(move |v| format!("{file}:{}: `{}`: {}", v.line, v.path, v.rule))
        })
        .collect();
    assert!(report.is_empty(), "layering violations:\n{}", report.join("\n"));
}

#[test]
fn every_module_has_a_layer() {
    let mut unknown = vec![];
    for entry in std::fs::read_dir(src()).unwrap().chain(std::fs::read_dir(core_src()).unwrap()) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let module = name.trim_end_matches(".rs");
        let is_module = path.is_dir() || name.ends_with(".rs");
        // The property tests' shared configuration is test support of the core crate, not a layer.
        let test_support = name == "proptest_config.rs";
        if is_module
            && !test_support
            && !TOP.contains(&name.as_str())
            && !LAYERS.iter().any(|(m, _)| *m == module)
        {
            unknown.push(name);
        }
    }
    assert!(unknown.is_empty(), "modules without a row in LAYERS (add one): {unknown:?}");
}

/// The core crate holds exactly the pure layers, and its manifest names no dependency that does I/O:
/// with none of them a dependency, naming one there does not compile.
#[test]
fn the_core_crate_is_the_pure_layers_and_depends_on_nothing_that_does_io() {
    let mut modules: Vec<String> = std::fs::read_dir(core_src())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_string())
        // lib.rs, and the property tests' shared configuration (test support, not a layer).
        .filter(|name| name != "lib" && name != "proptest_config")
        .collect();
    modules.sort();
    assert_eq!(modules, ["apis", "disruption", "model", "scheduling"]);
    let manifest = std::fs::read_to_string(core_src().parent().unwrap().join("Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("\n[")
        .find(|section| section.starts_with("dependencies]"))
        .expect("a [dependencies] section");
    // `kube` itself is the client's facade; the core takes kube-core and kube-derive instead.
    const DOES_IO: &[&str] =
        &["tokio", "reqwest", "hyper", "hyper-util", "kube", "kube-client", "kube-runtime", "chrono"];
    for line in
        dependencies.lines().skip(1).filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    {
        let name = line.split(['=', ' ']).next().unwrap_or_default();
        assert!(
            !DOES_IO.contains(&name) && !name.starts_with("azure_"),
            "the core crate depends on {name}, which does I/O: {line}"
        );
    }
    for decision_layer in ["model", "scheduling", "disruption"] {
        assert!(
            PURE.contains(&decision_layer),
            "{decision_layer} is in the core crate and must be checked as pure"
        );
    }
}

/// The controllers files that may name the Azure provider's internals (`crate::cloud::azure::…`)
/// rather than the `CloudProvider` boundary, each with what it takes from there: only the start-up
/// wiring, which builds the provider. Everything else a controller needs from Azure (instance types,
/// the launch request, the AKSNodeClass status, which claim a machine belongs to) is a provider method.
const AZURE_IN_CONTROLLERS: &[(&str, &str)] =
    &[("controllers/start.rs", "wiring: builds the ARM clients and the Azure provider from the settings")];

#[test]
fn controllers_name_the_azure_provider_only_where_listed() {
    let mut files = vec![];
    rust_files(&src().join("controllers"), &mut files);
    let mut naming = vec![];
    for file in files {
        let code = strip_comments_and_strings(&std::fs::read_to_string(&file).unwrap());
        if paths(&code).iter().any(|(_, p)| p.starts_with(&["crate".into(), "cloud".into(), "azure".into()]))
        {
            naming.push(file.strip_prefix(src()).unwrap().display().to_string());
        }
    }
    let listed: Vec<&str> = AZURE_IN_CONTROLLERS.iter().map(|(f, _)| *f).collect();
    let unlisted: Vec<&String> = naming.iter().filter(|f| !listed.contains(&f.as_str())).collect();
    assert!(unlisted.is_empty(), "controllers that name cloud::azure without a row in AZURE_IN_CONTROLLERS (use the CloudProvider trait): {unlisted:?}");
    let stale: Vec<&&str> = listed.iter().filter(|f| !naming.iter().any(|n| n == **f)).collect();
    assert!(stale.is_empty(), "no longer name cloud::azure, remove their rows: {stale:?}");
}

// The checker itself, on small sources: it must catch what it is for, and only that.

fn rules(module: &str, source: &str) -> Vec<(usize, String)> {
    check_source(module, 2, PURE.contains(&module), source).into_iter().map(|v| (v.line, v.path)).collect()
}

#[test]
fn an_upward_import_is_named_with_its_line() {
    let found = check_source("scheduling", 2, true, "use std::fmt;\nuse crate::catalog::InstanceType;\n");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].line, 2);
    assert_eq!(found[0].path, "crate::catalog::InstanceType");
    assert_eq!(found[0].rule, "scheduling may use only model, apis");
}

#[test]
fn grouped_inline_and_super_paths_are_seen() {
    assert_eq!(
        rules("model", "use crate::{labels, apis::{NodePool, common::Taint}};"),
        vec![(1, "crate::apis::NodePool".to_string()), (1, "crate::apis::common::Taint".to_string())]
    );
    assert_eq!(rules("apis", "fn f() { let _ = crate::state::Cluster::new(); }").len(), 1);
    assert_eq!(rules("catalog", "use super::super::scheduling::solve;").len(), 1);
    assert!(rules("catalog", "use super::sku::SkuRecord;").is_empty());
    assert_eq!(rules("cloud", "use crate::controllers::start;").len(), 1);
    assert!(rules("controllers", "use crate::cloud::CloudProvider;").is_empty());
    assert!(rules("state", "use crate::scheduling::{self, SolveInput};").is_empty());
}

#[test]
fn io_and_clock_are_refused_in_pure_modules() {
    for source in [
        "use tokio::sync::Mutex;",
        "#[tokio::test]\nasync fn t() {}",
        "use kube::{Api, Client};",
        "use kube::runtime::watcher;",
        "fn f() { let _ = reqwest::Client::new(); }",
        "use azure_core::Url;",
        "use std::{collections::BTreeMap, fs};",
        "fn f() { std::env::var(\"X\").ok(); }",
        "fn f() { std::process::exit(1) }",
        "use std::time::SystemTime;\nfn f() { SystemTime::now(); }",
        "fn f() { std::time::Instant::now(); }",
        "fn f() { chrono::Utc::now(); }",
    ] {
        assert!(!rules("scheduling", source).is_empty(), "not caught: {source}");
        assert!(rules("cloud", source).is_empty(), "only pure modules are restricted: {source}");
    }
}

#[test]
fn comments_strings_and_lookalikes_are_not_code() {
    for source in [
        "// uses tokio::spawn elsewhere\nfn f() {}",
        "/// See [`crate::catalog::instance_types`].\nfn f() {}",
        "/* crate::state::Cluster */ fn f() {}",
        "const S: &str = \"tokio::spawn and crate::cloud\";",
        "const S: &str = r#\"std::fs \"quoted\" crate::sim\"#;",
        "const K: &str = \"karpenter.azure.com/sku-hyperv-generation\";",
        "fn f<'a>(x: &'a str) -> char { let _ = '\"'; 'x' }",
        "use kube::core::ObjectMeta;",
        "use std::time::Duration;",
        "fn f() { let _ = azure_regions(); }",
    ] {
        assert!(
            rules("scheduling", source).is_empty(),
            "false alarm: {source}: {:?}",
            rules("scheduling", source)
        );
    }
}
