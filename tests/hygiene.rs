//! The repository itself: no file carries a merge-conflict marker (one
//! slipped into a recording script once and broke it silently, since CI
//! never runs the recorders).

use std::path::Path;

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        // Not following links: tests leave links to /dev/zero and FIFOs in
        // their temporary directories, which reading would never finish.
        let Ok(kind) = e.file_type() else {
            continue;
        };
        if kind.is_dir() {
            // A build directory by any name (CARGO_TARGET_DIR inside the
            // checkout, where those temporary directories are): cargo marks
            // each with CACHEDIR.TAG.
            if p.join("CACHEDIR.TAG").exists() {
                continue;
            }
            walk(&p, out);
        } else if kind.is_file() {
            out.push(p);
        }
    }
}

fn markers(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> ") || *l == "=======")
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn no_file_holds_a_merge_conflict_marker() {
    let mut files = Vec::new();
    walk(Path::new(env!("CARGO_MANIFEST_DIR")), &mut files);
    assert!(files.len() > 50, "the walk found the sources");
    let mut bad = Vec::new();
    for f in files {
        if let Ok(text) = std::fs::read_to_string(&f) {
            for line in markers(&text) {
                bad.push(format!("{}:{line}", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "merge-conflict markers at {bad:?}");
}

#[test]
fn the_marker_finder_finds_markers() {
    let t = "a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> x\n";
    assert_eq!(markers(t), vec![2, 4, 6]);
    assert!(markers("a == b\n// ======= not alone\n").is_empty());
}
