//! The container image, as far as it can be checked without a container engine: the Dockerfile builds
//! for linux/amd64 and linux/arm64 from one build stage, and the binary it copies into `FROM scratch` must
//! need nothing from the image. This test runs the build stage for both architectures with
//! `hack/image-build.sh` (its steps as written, the dependency layer cached as BuildKit caches it), then
//! checks that each binary is a static executable of its architecture, that the amd64 one works inside an
//! empty root directory, and that a one-line change to the sources rebuilds without compiling any
//! dependency again (the time is printed).
//!
//! The release builds are slow the first time (all dependencies, about 14 minutes per architecture); their
//! output is kept in `<target dir>/image/<arch>` and reused afterwards. `cargo test --all-targets` leaves
//! this test out (`test = false` in Cargo.toml): `make test` starts both builds in the background while
//! the other tests run, then runs `cargo test --test container_image`.
//!
//! The build needs rustup's two musl targets, and zig and cargo-zigbuild (PyPI's ziglang and
//! cargo-zigbuild, at the versions the Dockerfile pins); without them the test fails at once and names
//! `hack/deps.sh`, which installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

const DOCKERFILE: &str = include_str!("../Dockerfile");

/// ELF program header types and dynamic tags (System V ABI).
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;

/// The directory `hack/image-build.sh` works in: `IMAGE_DIR`, as hack/test.sh sets it, else
/// `<cargo target dir>/image`.
fn image_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("IMAGE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    base.join("image")
}

/// Runs `hack/image-build.sh` with `args`; its stdout, or a panic with its log.
fn image_build(args: &[&str]) -> String {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/image-build.sh"))
        .args(args)
        .env("IMAGE_DIR", image_dir())
        .output()
        .expect("running hack/image-build.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
    assert!(out.status.success(), "hack/image-build.sh {args:?} failed:\n{}", tail.join("\n"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ELF `e_machine` of each architecture the image is built for.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

fn elf_machine(elf: &[u8]) -> u16 {
    u16::from_le_bytes([elf[0x12], elf[0x13]])
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

/// What the cross builds need from the machine and does not have, each with what provides it.
fn missing_build_tools() -> Vec<String> {
    let mut missing = Vec::new();
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    for target in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        match &installed {
            Ok(out) if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == target) => {}
            Ok(_) => missing.push(format!("the rust target {target} (rustup target add {target})")),
            // Without rustup the toolchain may still have the target; the build itself will tell.
            Err(_) => {}
        }
    }
    if find_on_path("cargo-zigbuild").is_none() {
        missing.push("cargo-zigbuild (pip install cargo-zigbuild)".into());
    }
    let zig = Command::new("python3").args(["-m", "ziglang", "version"]).output();
    if !zig.is_ok_and(|o| o.status.success()) {
        missing.push("zig (pip install ziglang)".into());
    }
    missing
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

#[test]
fn both_architectures_build_static_binaries_the_amd64_one_runs_and_a_source_change_reuses_the_dependencies() {
    assert!(DOCKERFILE.contains("\nFROM scratch\n"), "the final stage should be FROM scratch");
    assert!(DOCKERFILE.contains("\nUSER 65532:65532\n"), "the image should run as a non-root user");
    assert!(
        DOCKERFILE.contains("FROM --platform=$BUILDPLATFORM ") && DOCKERFILE.contains("\nARG TARGETARCH\n"),
        "the build stage runs on the build platform and cross-compiles for TARGETARCH"
    );
    let manifests =
        DOCKERFILE.find("COPY Cargo.toml Cargo.lock").expect("the dependency layer copies the manifests");
    let sources = DOCKERFILE.find("\nCOPY . .\n").expect("the sources are copied whole");
    assert!(manifests < sources, "the dependency layer comes before the sources");
    let missing = missing_build_tools();
    assert!(
        missing.is_empty(),
        "the image build needs {}; run `hack/deps.sh` to install what is missing",
        missing.join(" and ")
    );
    let mut binaries = vec![];
    for (arch, machine) in [("amd64", EM_X86_64), ("arm64", EM_AARCH64)] {
        let out = image_build(&[arch]);
        let binary = PathBuf::from(out.lines().last().expect("the script prints the binary's path"));
        let elf = std::fs::read(&binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
        if let Err(why) = check_static(&elf) {
            panic!("{} is not statically linked: {why}", binary.display());
        }
        assert_eq!(elf_machine(&elf), machine, "{arch}: {} is built for another machine", binary.display());
        binaries.push(binary);
    }
    let binary = &binaries[0];

    // An empty root: no libc, no loader, no /etc, no certificates; only the binary.
    let root = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(binary, root.path().join("karpenter-azure")).expect("copying the binary");
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

    // The dependency layer holds: a one-line change compiles the project's crates only.
    let rebuilt = image_build(&["amd64", "--one-line-change"]);
    println!("{}", rebuilt.trim());
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
