//! The `ptec` command line: a thin caller of the ptec library.
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ptec", version, about = "Ahead-of-time compiler from ExecuTorch .pte programs to Rust")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a .pte, .bp, .bpte or .ptd file holds.
    Inspect {
        file: PathBuf,
        /// Print a JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// External tensor data (.ptd) the program refers to.
        #[arg(long = "data")]
        data: Vec<PathBuf>,
    },
}

fn read(path: &PathBuf) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn inspect(file: &PathBuf, json: bool, data: &[PathBuf]) -> Result<(), String> {
    let bytes = read(file)?;
    let data_bytes = data.iter().map(read).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&[u8]> = data_bytes.iter().map(|d| d.as_slice()).collect();
    let loaded = ptec::load(&bytes, &refs).map_err(|e| format!("{}: {e}", file.display()))?;
    if json {
        let doc = ptec::inspect::to_json(&loaded, bytes.len());
        println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?);
    } else {
        print!("{}", ptec::inspect::to_text(&loaded, &file.display().to_string(), bytes.len()));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Inspect { file, json, data } => inspect(file, *json, data),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}
