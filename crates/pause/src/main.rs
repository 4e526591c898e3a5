//! `pause`: the first process of every r8s pod sandbox.
//!
//! It holds the pod's namespaces open for the pod's containers and, as PID 1 of the pod's PID
//! namespace, reaps the zombies that end up parented to it. SIGINT and SIGTERM make it exit 0;
//! otherwise it sleeps until a signal arrives. `pause -v` prints its version.
//!
//! No crates: the few C library calls it needs are declared here by hand (glibc, which std
//! links anyway), so the binary builds statically with `-C target-feature=+crt-static`.

use std::ffi::c_int;
use std::process::ExitCode;

#[cfg(not(target_os = "linux"))]
compile_error!("pause runs only on Linux");
#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
compile_error!("signal numbers differ on this architecture");

const SIGINT: c_int = 2;
const SIGTERM: c_int = 15;
const SIGCHLD: c_int = 17;
const WNOHANG: c_int = 1;
/// `signal()`'s error return, `(sighandler_t) -1`.
const SIG_ERR: usize = usize::MAX;

extern "C" {
    // glibc's signal() has BSD semantics: the handler stays installed and slow calls restart.
    fn signal(signum: c_int, handler: usize) -> usize;
    fn waitpid(pid: i32, status: *mut c_int, options: c_int) -> i32;
    fn pause() -> c_int;
    fn getpid() -> i32;
    fn write(fd: c_int, buf: *const u8, count: usize) -> isize;
    fn _exit(status: c_int) -> !;
}

/// Writes straight to stderr: the only output allowed inside a signal handler.
fn say(msg: &[u8]) {
    // SAFETY: `msg` is a valid buffer of `msg.len()` bytes; write(2) is async-signal-safe.
    unsafe { write(2, msg.as_ptr(), msg.len()) };
}

extern "C" fn on_shutdown(signum: c_int) {
    say(if signum == SIGINT {
        b"pause: SIGINT, exiting\n"
    } else {
        b"pause: SIGTERM, exiting\n"
    });
    // SAFETY: _exit is async-signal-safe; there is nothing to flush or clean up.
    unsafe { _exit(0) }
}

extern "C" fn on_child(_signum: c_int) {
    reap();
}

/// Collects every child that has exited, without blocking.
fn reap() {
    // SAFETY: waitpid with a null status pointer is allowed and async-signal-safe.
    while unsafe { waitpid(-1, std::ptr::null_mut(), WNOHANG) } > 0 {}
}

fn install(signum: c_int, handler: extern "C" fn(c_int)) -> Result<(), String> {
    // SAFETY: the handlers only call async-signal-safe functions (write, waitpid, _exit).
    if unsafe { signal(signum, handler as usize) } == SIG_ERR {
        return Err(format!("pause: cannot install the handler for signal {signum}"));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        [v] if v == "-v" => {
            println!("pause {} (r8s)", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("usage: pause [-v]");
            return ExitCode::from(2);
        }
    }
    // SAFETY: getpid cannot fail.
    if unsafe { getpid() } != 1 {
        eprintln!("pause: warning: not PID 1, so orphans of the pod are not reparented here");
    }
    let handlers: [(c_int, extern "C" fn(c_int)); 3] =
        [(SIGINT, on_shutdown), (SIGTERM, on_shutdown), (SIGCHLD, on_child)];
    for (signum, handler) in handlers {
        if let Err(e) = install(signum, handler) {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    // Children that exited before the SIGCHLD handler was in place sent their signal to nobody.
    reap();
    loop {
        // SAFETY: pause only sleeps until a signal handler has run.
        unsafe { pause() };
    }
}
