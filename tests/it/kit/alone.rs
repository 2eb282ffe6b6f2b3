//! Running one test alone in a child process of this binary, for a test that
//! must change process-wide state (the environment) which the other tests of
//! the binary read from their threads.

use std::process::Command;

/// Set in the child: this process runs the one test named in it.
const ALONE: &str = "SDK_TEST_ALONE";

/// Whether this process is the child running `test` (its full path, e.g.
/// `production::a_test`) alone. In the parent it re-runs this binary on that
/// one test with one thread, asserts the child ran exactly it and passed,
/// and returns `false`: the caller then returns, its work done by the child.
pub fn in_own_process(test: &str) -> bool {
    if std::env::var(ALONE).is_ok_and(|t| t == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let output = Command::new(exe)
        .args([test, "--exact", "--test-threads", "1", "--nocapture"])
        .env(ALONE, test)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test} alone in its process:\n{stdout}\n{stderr}"
    );
    false
}
