//! `legate-scripted-agent`: revisor on stdio, with the faults and directives described in
//! the `legate_testkit` crate docs. For tests only.
//!
//! This file owns process start and exit only; everything else lives in the library.

use legate_testkit::{AGENT_BIN, EXIT_AT_START_CODE, Fault};

fn main() {
    let fault = match Fault::from_env() {
        Ok(fault) => fault,
        Err(error) => {
            eprintln!("{AGENT_BIN}: {error}");
            std::process::exit(2);
        }
    };
    if fault == Fault::ExitAtStart {
        std::process::exit(EXIT_AT_START_CODE);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{AGENT_BIN}: cannot start the runtime: {error}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(legate_testkit::run(fault));
    // Exit without dropping the runtime: the stdin reader thread cannot be cancelled.
    std::process::exit(code);
}
