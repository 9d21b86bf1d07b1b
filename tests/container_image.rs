//! The container image, as far as it can be checked without a container engine: the binary the
//! Dockerfile copies into `FROM scratch` must need nothing from the image. This test runs the
//! Dockerfile's own `cargo build` line, then checks that the binary is statically linked (no ELF
//! interpreter, no shared-library dependency) and that it works inside an empty root directory.
//!
//! The release build for the musl target is slow the first time (all dependencies); its output is kept
//! in `<target dir>/image` and reused afterwards. `cargo test --all-targets` leaves this test out
//! (`test = false` in Cargo.toml): `make test` starts the build in the background while the other tests
//! run, then runs `cargo test --test container_image`.
//!
//! The build needs the musl target of rustup and Debian's musl-tools (ring compiles C with
//! `x86_64-linux-musl-gcc`); without them the test fails at once and names `hack/deps.sh`, which installs
//! both.

use std::path::{Path, PathBuf};
use std::process::Command;

const DOCKERFILE: &str = include_str!("../Dockerfile");

/// The environment the image build runs with, here and in hack/test.sh (keep the two lists equal).
const BUILD_ENVIRONMENT: &[&str] =
    &["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "TMPDIR"];

/// ELF program header types and dynamic tags (System V ABI).
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;

/// The arguments of the Dockerfile's `RUN cargo build ...` line and the path its `RUN cp` copies.
fn dockerfile_build() -> (Vec<String>, String) {
    let run_lines: Vec<&str> = DOCKERFILE.lines().filter_map(|l| l.trim().strip_prefix("RUN ")).collect();
    let build = run_lines
        .iter()
        .find_map(|l| l.strip_prefix("cargo build "))
        .expect("the Dockerfile has a `RUN cargo build` line");
    let copied = run_lines
        .iter()
        .find_map(|l| l.strip_prefix("cp target/"))
        .and_then(|l| l.split_whitespace().next())
        .expect("the Dockerfile copies the binary out of target/ with `RUN cp`");
    (build.split_whitespace().map(str::to_string).collect(), copied.to_string())
}

fn image_target_dir() -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    base.join("image")
}

/// `Err` names what makes the binary depend on its environment.
fn check_static(elf: &[u8]) -> Result<(), String> {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().expect("8 bytes")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    for i in 0..phnum {
        let header = phoff + i * phentsize;
        match u32_at(header) {
            PT_INTERP => return Err("it has an ELF interpreter (dynamically linked)".into()),
            PT_DYNAMIC => {
                // A static PIE keeps a dynamic section for relocations, but must need no library.
                let (offset, size) = (u64_at(header + 8), u64_at(header + 32));
                for entry in elf[offset..offset + size].chunks_exact(16) {
                    match i64::from_le_bytes(entry[..8].try_into().expect("8 bytes")) {
                        DT_NULL => break,
                        DT_NEEDED => return Err("it needs a shared library (DT_NEEDED)".into()),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// What the musl build needs from the machine and does not have, each with what provides it.
fn missing_build_tools(args: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    let target =
        args.iter().skip_while(|a| *a != "--target").nth(1).expect("the Dockerfile builds with --target");
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    match installed {
        Ok(out) if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == target) => {}
        Ok(_) => missing.push(format!("the rust target {target} (rustup target add {target})")),
        // Without rustup the toolchain may still have the target; the build itself will tell.
        Err(_) => {}
    }
    let c_compiler = format!("{}-gcc", target.replace("-unknown-", "-"));
    if find_on_path(&c_compiler).is_none() {
        missing.push(format!("{c_compiler} (Debian's musl-tools)"));
    }
    missing
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

#[test]
fn the_image_binary_is_static_and_runs_in_an_empty_root() {
    assert!(DOCKERFILE.contains("\nFROM scratch\n"), "the final stage should be FROM scratch");
    assert!(DOCKERFILE.contains("\nUSER 65532:65532\n"), "the image should run as a non-root user");
    let (args, copied) = dockerfile_build();
    let missing = missing_build_tools(&args);
    assert!(
        missing.is_empty(),
        "the image build needs {}; run `hack/deps.sh` to install what is missing",
        missing.join(" and ")
    );
    let target_dir = image_target_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Only the variables hack/test.sh also passes to its background run of this build: the test
    // runner's own (CARGO_PKG_*, CARGO_MANIFEST_DIR, ...) would make build scripts that watch their
    // environment rerun, and the build could not reuse that run's output.
    let status = Command::new(&cargo)
        .arg("build")
        .args(&args)
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .envs(BUILD_ENVIRONMENT.iter().filter_map(|k| std::env::var_os(k).map(|v| (k, v))))
        .status()
        .expect("running cargo");
    assert!(status.success(), "`cargo build {}` failed", args.join(" "));
    let binary = target_dir.join(&copied);
    let elf = std::fs::read(&binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    if let Err(why) = check_static(&elf) {
        panic!("{} is not statically linked: {why}", binary.display());
    }

    // An empty root: no libc, no loader, no /etc, no certificates; only the binary.
    let root = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(&binary, root.path().join("karpenter-azure")).expect("copying the binary");
    let in_empty_root = |args: &[&str]| {
        // chroot needs root; an unprivileged run maps the caller to root in a user namespace.
        let chroot = program("chroot");
        let mut command = if running_as_root() {
            Command::new(&chroot)
        } else {
            let mut unshare = Command::new(program("unshare"));
            unshare.arg("--map-root-user").arg(&chroot);
            unshare
        };
        command.arg(root.path()).arg("/karpenter-azure").args(args).env_clear();
        command.output().expect("running chroot")
    };
    let version = in_empty_root(&["--version"]);
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.status.success() && text.starts_with("karpenter-azure "),
        "--version in an empty root: {text}{}",
        String::from_utf8_lossy(&version.stderr)
    );
    // The embedded catalog works without any file of the image.
    let catalog = in_empty_root(&["catalog", "--region", "eastus", "--output", "json"]);
    assert!(
        catalog.status.success(),
        "catalog in an empty root: {}",
        String::from_utf8_lossy(&catalog.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&catalog.stdout).expect("catalog prints JSON");
    assert!(listed.as_array().is_some_and(|a| a.len() > 100), "the catalog lists the eastus sizes");
    // A bad setting still stops start-up with a one-line message and exit 2.
    let controller = in_empty_root(&["controller", "--no-such-flag"]);
    assert_eq!(controller.status.code(), Some(2), "{}", String::from_utf8_lossy(&controller.stderr));
}

/// A system program's full path: the child's environment is cleared, so it cannot be found by PATH.
fn program(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed (coreutils / util-linux)"))
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Uid:")).map(|l| l.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn a_dynamically_linked_binary_is_recognised() {
    // The test binary itself is linked against the host's libc: the check must refuse it.
    let me = std::env::current_exe().expect("the test binary's path");
    let elf = std::fs::read(me).expect("reading the test binary");
    assert!(check_static(&elf).is_err());
}
