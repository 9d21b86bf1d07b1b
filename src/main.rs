//! The `karpenter-azure` command line: wiring only; the work is done in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "karpenter-azure", version, about = "A Kubernetes node autoscaler for Azure")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CRD manifests to crds/ and charts/karpenter-azure/crds/.
    Crdgen {
        /// The repository root to write under.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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
