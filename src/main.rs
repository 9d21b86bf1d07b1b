//! The `karpenter-azure` command line: wiring only; the work is done in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use karpenter_azure::catalog::OutputFormat;
use karpenter_azure::sim::catalog_command::{self, CatalogArgs};

/// Every allocation of the command, the controller included (see the dependency's note in Cargo.toml).
/// The `system-allocator` feature leaves the C library's malloc in place, so a heap profiler that
/// intercepts malloc (heaptrack) sees every allocation.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process. The heap holds many small objects of different
/// lifetimes, so a 2 MiB huge page is rarely all in use, yet all of it stays resident: with them a
/// controller holds more memory for the same objects. mimalloc's `no_thp` feature stops it asking for
/// huge pages (`madvise`); this also covers hosts whose THP setting is `always` (the kernel then backs
/// any large aligned mapping with them unasked, AKS's default). The flag belongs to the process and is
/// read at each page fault, so memory touched after this call gets 4 KiB pages.
#[cfg(target_os = "linux")]
fn refuse_transparent_huge_pages() {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes four integer arguments and touches no memory of ours.
    // A kernel before 3.15 refuses the option; the process then runs as it would have, so the status
    // is not checked.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(not(target_os = "linux"))]
fn refuse_transparent_huge_pages() {}

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
        /// An AKSNodeClass manifest: maxPods and osDiskSizeGB shape allocatable resources; imageFamily,
        /// gpu.mode and artifactStreaming decide which sizes its nodes can run.
        #[arg(long)]
        nodeclass: Option<PathBuf>,
        /// Files of NodeOverlay manifests applied to the sizes' prices and capacity (repeatable).
        #[arg(long = "overlay")]
        overlays: Vec<PathBuf>,
        /// List the region's sizes the AKSNodeClass (or any class) may not offer, each with the reason,
        /// instead of the sizes it offers.
        #[arg(long)]
        left_out: bool,
        /// table or json.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
    /// Show what would be launched for a scenario or a cluster snapshot, and what it would cost.
    ///
    /// FILEs are Kubernetes YAML or JSON (multi-document or List): NodePool, AKSNodeClass, NodeOverlay, Pod,
    /// Deployment, ReplicaSet, StatefulSet, Job, DaemonSet, Node, PodDisruptionBudget, Namespace.
    /// With no FILE a built-in demo runs.
    Simulate {
        /// Scenario files; none runs the built-in demo.
        files: Vec<PathBuf>,
        /// The Azure region, such as eastus.
        #[arg(long, default_value = "eastus")]
        region: String,
        /// A JSON list of instance types that replaces the Azure catalog (schema in docs/simulate.md).
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// table or json.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// Run a timeline instead: a file of initial objects and events at virtual times (or
        /// `demo`), with provisioning, node lifecycle and disruption on a virtual clock.
        #[arg(long, value_name = "FILE|demo")]
        timeline: Option<PathBuf>,
        /// With --timeline: also write a self-contained HTML report (plots and decisions) here.
        #[arg(long, value_name = "FILE.html", requires = "timeline")]
        report: Option<PathBuf>,
        /// When to judge disruption (consolidateAfter, expireAfter, budget schedules), as RFC 3339
        /// such as 2026-12-01T12:00:00Z; default: the current time.
        #[arg(long, value_parser = parse_rfc3339)]
        now: Option<k8s_openapi::jiff::Timestamp>,
        /// Instead of the report, explain the decision about one object and its reason:
        /// pod/NAMESPACE/NAME or node/NAME (repeatable).
        #[arg(long, value_name = "pod/NS/NAME|node/NAME", conflicts_with = "timeline")]
        explain: Vec<String>,
        /// Read the objects from the cluster of the current kubeconfig (read-only lists) instead of
        /// files.
        #[arg(long, conflicts_with_all = ["timeline", "files"])]
        from_cluster: bool,
    },
    /// Time the solver on upstream's benchmark and a mixed workload; prints a table of numbers.
    Bench {
        /// upstream, mixed, fragmented, settled, overlays or all (upstream and mixed, then fragmented).
        #[arg(long, value_enum, default_value_t = karpenter_azure::bench::Workload::All)]
        workload: karpenter_azure::bench::Workload,
        /// Pod counts to solve, comma separated; default 1000,2000,5000,10000,20000,50000, the curve
        /// judged against n log n (fragmented: the largest is the pods provisioned; default 20000;
        /// overlays: NodeOverlay counts, default 0,10,100,1000).
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
        /// Fragmented: 0 (the default) gives the pool upstream's default policy,
        /// WhenEmptyOrUnderutilized (any saving); more makes it Balanced with this threshold (savings
        /// share over disruption share; upstream's is 0.5).
        #[arg(long, default_value_t = 0.0)]
        consolidation_threshold: f64,
        /// Fragmented and settled: provision only on sizes with at most this many vCPUs (more, smaller nodes).
        #[arg(long)]
        max_vcpus: Option<u32>,
    },
    /// Compare our solver with upstream Karpenter's on upstream's benchmark input.
    ///
    /// DIR is what `hack/upstream-bench.sh run DIR [SIZES...]` writes: one directory per size N
    /// (pods.yaml, nodepool.yaml, catalog.json, upstream.json), or one such size directory. Each size
    /// runs in a child process, timing only our solve and reading its peak RSS; both plans are then
    /// checked with the feasibility checker. Prints one table row per size, then any violations.
    BenchUpstream {
        /// The run directory (or one size directory).
        dir: PathBuf,
        /// Sizes to measure (subdirectories of DIR); none measures every size DIR holds.
        sizes: Vec<String>,
        /// table or json.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// Stop our solve after this many seconds (the row then has no plan of ours).
        #[arg(long, value_name = "SECONDS")]
        solve_timeout: Option<u64>,
        /// Give up on the feasibility checks of a size after this many seconds (0: no limit). The
        /// checker is written for clarity, not speed, and is slow on thousands of pods.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        check_timeout: u64,
        /// Measure DIR, one size directory, in this process and print its result as JSON (what the
        /// parent runs in each child).
        #[arg(long, hide = true)]
        one: bool,
    },
    /// Our disruption pass next to upstream Karpenter's on the clusters `hack/upstream-disruption.sh
    /// run DIR` wrote (DIR/<nodes>/<shape>/), once per consolidation policy, both outcomes checked for
    /// feasibility.
    BenchUpstreamDisruption {
        /// The run directory (or one <nodes>/<shape> directory).
        dir: PathBuf,
        /// Sizes to measure (subdirectories of DIR); none measures every size DIR holds.
        sizes: Vec<String>,
        /// table or json.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// When to judge disruption, as RFC 3339; default: an hour after each cluster's last
        /// NodeClaim creation, initialization or pod event, so runs on the same input agree.
        #[arg(long, value_parser = parse_rfc3339)]
        now: Option<k8s_openapi::jiff::Timestamp>,
    },
    /// Write the CRD manifests to crds/ and charts/karpenter-azure/crds/.
    Crdgen {
        /// The repository root to write under.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Print the table of every Prometheus metric, generated from the metrics registry; with --write,
    /// replace the table in FILE (between its markers) instead.
    MetricsTable {
        /// The Markdown file whose table to replace, e.g. docs/controller.md.
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
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

/// `simulate --from-cluster`: lists the objects of the current kubeconfig's cluster.
fn read_cluster() -> Result<Vec<karpenter_azure::sim::load::Source>, String> {
    use karpenter_azure::sim::from_cluster;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting the async runtime: {e}"))?;
    runtime.block_on(async {
        let client = from_cluster::client().await.map_err(|e| e.to_string())?;
        from_cluster::sources(&client).await.map_err(|e| e.to_string())
    })
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
    karpenter_azure::operator::logging::init(&validated.log_level, validated.log_format);
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
    let evictions = controllers::node::termination::eviction_client(config.clone())
        .context("connecting to the Kubernetes API server")?;
    let ca_bundle = start::cluster_ca_bundle(&validated, config.root_cert.as_deref())?;
    let client = kube::Client::try_from(config).context("connecting to the Kubernetes API server")?;
    let cloud = start::azure(&validated, &ca_bundle).context("setting up Azure")?;
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
    start::log_feature_gates(&validated);
    karpenter_azure::operator::upstream_only::log_without_effect(&validated.without_effect);
    controllers::run(client, evictions, cloud, start::settings(&validated), election).await?;
    Ok(())
}

/// `bench-upstream`: one child process per size (or, with `--one`, the measurement of one size).
fn run_bench_upstream(
    dir: &std::path::Path,
    sizes: &[String],
    output: OutputFormat,
    limits: &karpenter_azure::sim::upstream_bench::Limits,
    one: bool,
) -> ExitCode {
    use karpenter_azure::sim::upstream_bench as ub;
    if one {
        return match ub::measure(dir, limits) {
            Ok(result) => print_output(&(serde_json::to_string(&result).unwrap_or_default() + "\n")),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_USAGE)
            }
        };
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: finding this executable to run each size in: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Progress on stderr, so that stdout holds only the table (or JSON).
    let progress = |r: &ub::SizeResult| eprintln!("measured {} ({} pods)", r.size, r.pods);
    match ub::run(dir, sizes, |size| ub::measure_in_child(&exe, size, limits), progress) {
        Ok(results) => print_output(&ub::render(&results, output)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn main() -> ExitCode {
    refuse_transparent_huge_pages();
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
        Command::Catalog { region, nodepool, nodeclass, overlays, left_out, output } => {
            match catalog_command::run(&CatalogArgs {
                region,
                nodepool,
                nodeclass,
                overlays,
                left_out,
                output,
            }) {
                Ok(listing) => {
                    for warning in &listing.warnings {
                        eprintln!("warning: {warning}");
                    }
                    print_output(&listing.text)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        Command::Simulate { files, region, catalog, output, timeline: Some(timeline), report, .. } => {
            if !files.is_empty() {
                eprintln!(
                    "error: --timeline reads its objects from the timeline file; drop the FILE arguments"
                );
                return ExitCode::from(EXIT_USAGE);
            }
            let args =
                karpenter_azure::sim::timeline::TimelineArgs { timeline, region, catalog, output, report };
            match karpenter_azure::sim::timeline::command::run(&args) {
                Ok(text) => print_output(&text),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        Command::Simulate {
            files,
            region,
            catalog,
            output,
            timeline: None,
            now,
            explain,
            from_cluster,
            ..
        } => {
            let sources = if from_cluster {
                match read_cluster() {
                    Ok(sources) => sources,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(EXIT_USAGE);
                    }
                }
            } else {
                vec![]
            };
            let args =
                karpenter_azure::sim::SimulateArgs { files, region, catalog, output, now, explain, sources };
            match karpenter_azure::sim::run(&args) {
                Ok(text) => print_output(&text),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        Command::Bench { workload, sizes, consolidation_threshold, max_vcpus } => {
            use karpenter_azure::bench::Workload;
            if workload == Workload::Overlays {
                use karpenter_azure::bench_overlays;
                println!("{}", bench_overlays::render_header());
                let counts = if sizes.is_empty() { vec![0, 10, 100, 1_000] } else { sizes };
                bench_overlays::run(&counts, |row| println!("{}", bench_overlays::render_row(row)));
                return ExitCode::SUCCESS;
            }
            if workload == Workload::Settled {
                use karpenter_azure::bench_disruption;
                let options = karpenter_azure::disruption::Options {
                    consolidation_threshold,
                    ..karpenter_azure::disruption::Options::default()
                };
                let sizes = if sizes.is_empty() { vec![10_000, 20_000, 50_000] } else { sizes };
                for pods in sizes {
                    let result = bench_disruption::run_settled(pods, max_vcpus, &options);
                    println!("{}", bench_disruption::render_settled(&result));
                }
                return ExitCode::SUCCESS;
            }
            if workload != Workload::Fragmented {
                use karpenter_azure::sim::growth::{self, Point};
                println!("{}", karpenter_azure::bench::render_header());
                let mut series: Vec<(&'static str, Vec<Point>)> = vec![];
                let curve = [1_000, 2_000, 5_000, 10_000, 20_000, 50_000];
                let solve_sizes = if sizes.is_empty() { &curve[..] } else { &sizes[..] };
                karpenter_azure::bench::run(
                    workload,
                    solve_sizes,
                    karpenter_azure::scheduling::solve,
                    |result| {
                        println!("{}", karpenter_azure::bench::render_row(result));
                        let point = Point { pods: result.pods, seconds: result.elapsed.as_secs_f64() };
                        match series.iter_mut().find(|(w, _)| *w == result.workload) {
                            Some((_, points)) => points.push(point),
                            None => series.push((result.workload, vec![point])),
                        }
                    },
                );
                for (workload, points) in series.iter().filter(|(_, points)| points.len() > 1) {
                    println!("\n{}", growth::render(workload, points).trim_end());
                }
            }
            if matches!(workload, Workload::Fragmented | Workload::All) {
                let options = karpenter_azure::disruption::Options {
                    consolidation_threshold,
                    ..karpenter_azure::disruption::Options::default()
                };
                let pods = if workload == Workload::All {
                    20_000
                } else {
                    sizes.iter().copied().max().unwrap_or(20_000)
                };
                let result = karpenter_azure::bench_disruption::run(pods, max_vcpus, &options);
                println!("{}", karpenter_azure::bench_disruption::render(&result, &options));
            }
            ExitCode::SUCCESS
        }
        Command::BenchUpstream { dir, sizes, output, solve_timeout, check_timeout, one } => {
            let limits = karpenter_azure::sim::upstream_bench::Limits {
                solve_timeout: solve_timeout.map(std::time::Duration::from_secs),
                check_timeout: (check_timeout > 0).then(|| std::time::Duration::from_secs(check_timeout)),
            };
            run_bench_upstream(&dir, &sizes, output, &limits, one)
        }
        Command::BenchUpstreamDisruption { dir, sizes, output, now } => {
            use karpenter_azure::sim::upstream_disruption as ud;
            match ud::run(&dir, &sizes, now) {
                Ok(rows) => print_output(&ud::render(&rows, output)),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        Command::MetricsTable { write: None } => {
            print_output(&karpenter_azure::operator::metrics_table::table())
        }
        Command::MetricsTable { write: Some(path) } => {
            match karpenter_azure::operator::metrics_table::write(&path) {
                Ok(()) => {
                    println!("wrote {}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: metrics-table: {e}");
                    ExitCode::FAILURE
                }
            }
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

/// `--now`: an RFC 3339 timestamp.
fn parse_rfc3339(text: &str) -> Result<k8s_openapi::jiff::Timestamp, String> {
    text.parse().map_err(|e| format!("{e}; write an RFC 3339 time such as 2026-12-01T12:00:00Z"))
}
