//! `fake-agy`: the Antigravity CLI's headless interface, faked for tests (see
//! `legate_testkit::fake_agy`).
//!
//! This file owns process start and exit only; everything else lives in the library.

fn main() {
    let code = legate_testkit::fake_agy::main(std::env::args().skip(1).collect());
    std::process::exit(code);
}
