//! The names both endpoints agree on: where the runner puts the FIFO directory (an
//! environment variable) and what the two FIFOs in it are called. A module of its own so
//! that the runner, the client and the clean-up of stale directories share it without
//! importing each other.

/// Environment variable through which the runner hands the FIFO directory's absolute path
/// to the command it runs.
pub const FIFO_DIR_ENV: &str = "MEMTRACK_FIFO_DIR";

/// File name, inside the FIFO directory, of the FIFO the integration writes commands to.
pub const CONTROL_FIFO_NAME: &str = "control.fifo";

/// File name, inside the FIFO directory, of the FIFO the runner writes replies to.
pub const ACK_FIFO_NAME: &str = "ack.fifo";
