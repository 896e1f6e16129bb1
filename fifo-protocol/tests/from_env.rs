//! `FifoClient::from_env`. The only test in its binary, because it changes the process
//! environment.

use fifo_protocol::{FIFO_DIR_ENV, FifoClient, FifoRunner, IntegrationMode, SharedHandling};

#[test]
fn from_env_follows_the_environment_variable() {
    // SAFETY (all set_var/remove_var below): this is the only test in this binary, and no
    // other thread reads the environment meanwhile.
    unsafe { std::env::remove_var(FIFO_DIR_ENV) };
    assert!(FifoClient::from_env().is_none(), "no runner: must be None");

    unsafe { std::env::set_var(FIFO_DIR_ENV, "") };
    assert!(
        FifoClient::from_env().is_none(),
        "empty value: must be None"
    );

    let scratch = tempfile::tempdir().unwrap();
    let missing = scratch.path().join("gone");
    unsafe { std::env::set_var(FIFO_DIR_ENV, &missing) };
    let err = FifoClient::from_env().unwrap().unwrap_err();
    assert!(err.to_string().contains("gone"), "{err}");

    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (name, value) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    unsafe { std::env::set_var(name, &value) };
    let mut client = FifoClient::from_env().unwrap().unwrap();
    assert_eq!(client.dir(), std::path::Path::new(&value));
    assert_eq!(client.timeout(), fifo_protocol::DEFAULT_TIMEOUT);
    client.ping().unwrap();
    serving.stop().unwrap();
    unsafe { std::env::remove_var(FIFO_DIR_ENV) };
}
