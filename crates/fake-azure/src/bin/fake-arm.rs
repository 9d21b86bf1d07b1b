//! `fake-arm`: the fake Azure Resource Manager as a program of its own, for running the real controller
//! against a local cluster without Azure (`make playground`).
//!
//! It serves the same fake the tests start in-process (`fake_azure::arm`, the real ARM wire format and
//! AAD's token endpoint) on a loopback port, and boots each VM that reaches `Succeeded` into a Node of the
//! cluster its kubeconfig names, marked for kwok, which then plays the node's kubelet. Once it listens it
//! writes the controller's settings for it (`--env-file`: the endpoints, the subscription, the node
//! resource group, a subnet that exists and the client credential it accepts), so a controller started
//! with exactly those settings talks to it. The admin API (`/_admin/faults`, `/_admin/vms/<name>/evict`,
//! `/_admin/state`) is served too, to inject faults by hand. It runs until SIGINT or SIGTERM.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use fake_azure::arm::{FakeArm, FakeArmConfig, FakeSubnet, KubeNodeRegistrar};

/// The fake Azure Resource Manager, serving on 127.0.0.1 until SIGINT or SIGTERM.
#[derive(Parser, Debug)]
#[command(name = "fake-arm", version)]
struct Args {
    /// The cluster VMs join as Nodes (kwok plays their kubelet); without it VMs boot into no Node.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The loopback port to serve on; 0 takes a free one (the env file says which).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Written once the fake listens: `NAME=value` lines of the controller settings that point it here.
    #[arg(long)]
    env_file: Option<PathBuf>,
    /// The client ID (a GUID, as the controller requires) the token endpoint accepts with --client-secret.
    #[arg(long, default_value = "00000000-0000-0000-0000-0000000000c1")]
    client_id: String,
    #[arg(long, default_value = "fake-arm-client-secret")]
    client_secret: String,
    /// The region the subscription's VMs are in.
    #[arg(long, default_value = "eastus")]
    location: String,
    /// The node resource group, where the controller creates VMs and NICs.
    #[arg(long, default_value = "MC_rg_cluster_eastus")]
    node_resource_group: String,
    /// How long a VM create stays `Creating` (`2s`, `500ms`).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    provisioning_delay: Duration,
    /// How long a VM delete stays `Deleting`.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    deletion_delay: Duration,
    /// Between a VM reaching `Succeeded` and its Node registering.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    boot_delay: Duration,
}

/// The subnet the env file names: the fake's default, in the resource group `rg`.
fn subnet() -> FakeSubnet {
    FakeSubnet::new("rg", "vnet", "nodes", "10.224.0.0/16")
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(message) = run(args).await {
        eprintln!("fake-arm: {message}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let registrar = match &args.kubeconfig {
        Some(path) => Some(Arc::new(KubeNodeRegistrar::new(kube_client(path).await?)) as _),
        None => None,
    };
    let config = FakeArmConfig {
        resource_groups: vec![args.node_resource_group.clone()],
        location: args.location.clone(),
        client_secrets: vec![(args.client_id.clone(), args.client_secret.clone())],
        provisioning_delay: args.provisioning_delay,
        deletion_delay: args.deletion_delay,
        boot_delay: args.boot_delay,
        registrar,
        subnets: vec![subnet()],
        ..FakeArmConfig::default()
    };
    let fake = FakeArm::start_on(args.port, config)
        .await
        .map_err(|err| format!("listening on 127.0.0.1:{}: {err}", args.port))?;
    if let Some(path) = &args.env_file {
        write_private(path, &controller_env(&fake, &args))
            .map_err(|err| format!("{}: {err}", path.display()))?;
    }
    println!(
        "fake-arm: serving {} (subscription {}, {}, node resource group {}); VMs join {}",
        fake.base_url(),
        fake.subscription_id(),
        fake.location(),
        fake.resource_group(),
        args.kubeconfig.as_ref().map_or("no cluster".to_string(), |p| p.display().to_string())
    );
    shutdown_signal().await;
    println!("fake-arm: stopping");
    fake.shutdown().await;
    Ok(())
}

/// The controller's settings for this fake, one `NAME=value` a line (no value holds a space or a quote,
/// so the file reads the same with `source` and as an env file).
fn controller_env(fake: &FakeArm, args: &Args) -> String {
    let base = fake.base_url();
    let settings = [
        ("ARM_ENDPOINT", base.clone()),
        ("AZURE_AUTHORITY_HOST", base.clone()),
        ("AZURE_SUBSCRIPTION_ID", fake.subscription_id().to_string()),
        ("AZURE_TENANT_ID", fake.tenant_id().to_string()),
        ("AZURE_CLIENT_ID", args.client_id.clone()),
        ("AZURE_CLIENT_SECRET", args.client_secret.clone()),
        ("LOCATION", fake.location().to_string()),
        ("ARM_RESOURCE_GROUP", subnet().resource_group),
        ("AZURE_NODE_RESOURCE_GROUP", fake.resource_group().to_string()),
        ("VNET_SUBNET_ID", fake.subnet_id(&subnet())),
        // Offline there is no Retail Prices API: a path the fake answers 404 to, so prices come from the
        // embedded catalog at once instead of after a connect timeout.
        ("RETAIL_PRICES_URL", format!("{base}/no-retail-prices")),
    ];
    settings.iter().map(|(name, value)| format!("{name}={value}\n")).collect()
}

async fn kube_client(path: &Path) -> Result<kube::Client, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|err| format!("reading the kubeconfig {}: {err}", path.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|err| format!("loading the kubeconfig {}: {err}", path.display()))?;
    kube::Client::try_from(config).map_err(|err| format!("a client for {}: {err}", path.display()))
}

/// Writes `text` to `path` readable by its owner only (it holds the client secret), through a rename
/// so a reader never sees half of it.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let partial = path.with_extension("partial");
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&partial)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

/// `500ms`, `2s` or `0`.
fn parse_duration(value: &str) -> Result<Duration, String> {
    let number =
        |digits: &str| digits.parse::<u64>().map_err(|_| format!("{value:?} is not like 2s or 500ms"));
    if let Some(ms) = value.strip_suffix("ms") {
        Ok(Duration::from_millis(number(ms)?))
    } else if let Some(s) = value.strip_suffix('s') {
        Ok(Duration::from_secs(number(s)?))
    } else if value == "0" {
        Ok(Duration::ZERO)
    } else {
        Err(format!("{value:?} is not like 2s or 500ms"))
    }
}
