//! The `karpenter-azure` command line: wiring only; the work is done in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use karpenter_azure::catalog::command::{self as catalog_command, CatalogArgs};
use karpenter_azure::catalog::OutputFormat;

/// Exit code for bad input: unknown flags, invalid files, unknown regions.
const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(name = "karpenter-azure", version, about = "A Kubernetes node autoscaler for Azure")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against the cluster in KUBECONFIG (or in-cluster config) until SIGTERM.
    Controller(Box<karpenter_azure::operator::Options>),
    /// List the VM sizes a NodePool allows in a region, with allocatable resources and prices.
    Catalog {
        /// The Azure region, such as eastus.
        #[arg(long, default_value = "eastus")]
        region: String,
        /// A NodePool manifest whose requirements select the sizes.
        #[arg(long)]
        nodepool: Option<PathBuf>,
        /// An AKSNodeClass manifest (maxPods, osDiskSizeGB) that shapes allocatable resources.
        #[arg(long)]
        nodeclass: Option<PathBuf>,
        /// table or json.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
    /// Show what would be launched for a scenario or a cluster snapshot, and what it would cost.
    ///
    /// FILEs are Kubernetes YAML or JSON (multi-document or List): NodePool, AKSNodeClass, Pod,
    /// Deployment, ReplicaSet, StatefulSet, Job, DaemonSet, Node, PodDisruptionBudget, Namespace.
    /// With no FILE a built-in demo runs.
    Simulate {
        /// Scenario files; none runs the built-in demo.
        files: Vec<PathBuf>,
        /// The Azure region, such as eastus.
        #[arg(long, default_value = "eastus")]
        region: String,
        /// A JSON list of instance types that replaces the Azure catalog (schema in the README).
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// table or json.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
    /// Time the solver on upstream's benchmark and a mixed workload; prints a table of numbers.
    Bench {
        /// upstream, mixed or all.
        #[arg(long, value_enum, default_value_t = karpenter_azure::bench::Workload::All)]
        workload: karpenter_azure::bench::Workload,
        /// Pod counts to solve, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "1000,5000,20000")]
        sizes: Vec<usize>,
    },
    /// Write the CRD manifests to crds/ and charts/karpenter-azure/crds/.
    Crdgen {
        /// The repository root to write under.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
}

/// Prints a command's output; a closed pipe (`| head`) is a normal end, not a crash.
fn print_output(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: writing output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `controller`: validate the settings, connect to the cluster and Azure, run until SIGTERM.
fn run_controller(options: &karpenter_azure::operator::Options) -> ExitCode {
    let validated = match options.validate() {
        Ok(v) => v,
        Err(e) => {
            // One line naming the setting; never a secret (OptionsError redacts).
            eprintln!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // LOG_LEVEL is the controller's level; libraries (kube, hyper, azure) stay at info or above.
    let filter =
        tracing_subscriber::EnvFilter::try_new(format!("info,karpenter_azure={}", validated.log_level))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().json().with_env_filter(filter).with_current_span(false).init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(start_controller(validated)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "controller stopped");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn start_controller(validated: karpenter_azure::operator::Validated) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use karpenter_azure::controllers::{self, start};
    let config = kube::Config::infer().await.context("reading the Kubernetes client configuration")?;
    let evictions = controllers::termination::eviction_client(config.clone())
        .context("connecting to the Kubernetes API server")?;
    let client = kube::Client::try_from(config).context("connecting to the Kubernetes API server")?;
    let (cloud, catalog) = start::azure(&validated).context("setting up Azure")?;
    tracing::info!(
        cluster = %validated.cluster_name,
        location = %validated.azure.location,
        node_resource_group = %validated.azure.node_resource_group,
        "starting controller"
    );
    let election = validated.leader_election.clone().map(|lease| {
        karpenter_azure::operator::leader::Elector::new(
            client.clone(),
            lease,
            karpenter_azure::operator::leader::identity(),
        )
    });
    controllers::run(client, evictions, cloud, catalog, start::settings(&validated), election).await?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version are not errors.
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line naming the problem; the usage text is one `--help` away.
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("{first} (see --help)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match cli.command {
        Command::Controller(options) => run_controller(&options),
        Command::Catalog { region, nodepool, nodeclass, output } => {
            match catalog_command::run(&CatalogArgs { region, nodepool, nodeclass, output }) {
                Ok(text) => print_output(&text),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        Command::Simulate { files, region, catalog, output } => {
            let args = karpenter_azure::sim::SimulateArgs { files, region, catalog, output };
            match karpenter_azure::sim::run(&args) {
                Ok(text) => print_output(&text),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        Command::Bench { workload, sizes } => {
            println!("{}", karpenter_azure::bench::render_header());
            karpenter_azure::bench::run(workload, &sizes, karpenter_azure::scheduling::solve, |result| {
                println!("{}", karpenter_azure::bench::render_row(result));
            });
            ExitCode::SUCCESS
        }
        Command::Crdgen { root } => match karpenter_azure::apis::crdgen::write_all(&root) {
            Ok(files) => {
                for f in files {
                    println!("wrote {}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: crdgen: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
