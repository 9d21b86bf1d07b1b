//! The container image, as far as it can be checked without a container engine: the Dockerfile builds
//! linux/amd64 and linux/arm64 from one build stage (cargo-zigbuild cross-compiles for the musl targets),
//! and the binary it copies into `FROM scratch` must need nothing from the image. This test runs the
//! Dockerfile's build stage for both architectures through `hack/image-build.sh` (the same steps, with
//! BuildKit's layer caching for the dependency layer and the project layer), checks that each binary is
//! a statically linked ELF file for its architecture, and runs the amd64 one inside an empty root
//! directory. A second amd64 build after a one-line source change must reuse the dependency layer; it
//! prints how long it took.
//!
//! The first build is slow (all dependencies, twice); later ones restore the cached layers. `cargo test
//! --all-targets` leaves this test out (`test = false` in Cargo.toml): `make test` starts both builds in
//! the background while the other tests run, then runs `cargo test --test container_image`.
//!
//! The builds need the two musl targets of rustup and the Dockerfile's pinned ziglang and cargo-zigbuild
//! (from PyPI); without them hack/image-build.sh fails at once and names `hack/deps.sh`, which installs
//! them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const DOCKERFILE: &str = include_str!("../Dockerfile");

/// ELF machine numbers (System V ABI) of the image's architectures.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// ELF program header types and dynamic tags (System V ABI).
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;

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

/// What `hack/image-build.sh ARCH [--one-line-change]` printed last: "image-build ARCH: layer 1 ..., layer 2
/// ..., binary PATH".
struct ImageBuild {
    summary: String,
    binary: PathBuf,
}

fn image_build(arch: &str, one_line_change: bool) -> ImageBuild {
    let mut command = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/image-build.sh"));
    command.arg(arch);
    if one_line_change {
        command.arg("--one-line-change");
    }
    let output = command.output().expect("running hack/image-build.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "hack/image-build.sh {arch} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    let binary = summary
        .rsplit_once(", binary ")
        .map(|(_, p)| PathBuf::from(p))
        .expect("the summary names the binary");
    ImageBuild { summary, binary }
}

/// The ELF machine number of the file.
fn elf_machine(elf: &[u8]) -> u16 {
    u16::from_le_bytes([elf[0x12], elf[0x13]])
}

#[test]
fn both_architectures_build_from_one_dockerfile_into_static_binaries() {
    assert!(
        DOCKERFILE.contains("\nFROM --platform=$BUILDPLATFORM "),
        "the build stage runs on the build platform and cross-compiles"
    );
    assert!(DOCKERFILE.contains("\nARG TARGETARCH\n"), "the build stage reads BuildKit's TARGETARCH");
    for (arch, machine) in [("amd64", EM_X86_64), ("arm64", EM_AARCH64)] {
        let build = image_build(arch, false);
        eprintln!("{}", build.summary);
        let elf = std::fs::read(&build.binary).unwrap_or_else(|e| panic!("{}: {e}", build.binary.display()));
        if let Err(why) = check_static(&elf) {
            panic!("the {arch} binary {} is not statically linked: {why}", build.binary.display());
        }
        assert_eq!(elf_machine(&elf), machine, "the {arch} binary is built for {arch}");
    }
}

#[test]
fn a_one_line_change_rebuilds_only_the_project_layer() {
    // The dependency layer as the unchanged build left it (built or restored).
    let first = image_build("amd64", false);
    let started = Instant::now();
    let changed = image_build("amd64", true);
    eprintln!("{} ({:.0}s after a one-line change)", changed.summary, started.elapsed().as_secs_f64());
    assert!(
        changed.summary.contains("layer 1 CACHED"),
        "the dependency layer is reused: {}",
        changed.summary
    );
    assert!(
        changed.summary.contains("layer 2 built in"),
        "the project layer is rebuilt: {}",
        changed.summary
    );
    assert!(first.summary.starts_with("image-build amd64: "), "{}", first.summary);
}

#[test]
fn the_image_binary_is_static_and_runs_in_an_empty_root() {
    assert!(DOCKERFILE.contains("\nFROM scratch\n"), "the final stage should be FROM scratch");
    assert!(DOCKERFILE.contains("\nUSER 65532:65532\n"), "the image should run as a non-root user");
    let binary = image_build("amd64", false).binary;

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
