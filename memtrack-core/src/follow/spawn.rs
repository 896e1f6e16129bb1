//! Starts a command held before its `execve`, so probes can be in place before its
//! first instruction runs.
//!
//! `std::process::Command::spawn` cannot do this: it waits until the child has exec'd,
//! so a child that waits first deadlocks it (docs/ebpf-toolchain.md). The child here
//! waits, right before `execve`, for one byte on a pipe whose write end only the tracer
//! holds; the tracer seizes it with ptrace, writes the byte, and sees the exec as a
//! ptrace event. If memtrack dies before that, the pipe reads end-of-file and the child
//! execs the command anyway, untracked: a child held by a SIGSTOP (what this did
//! before) would stay stopped for good. Nothing the child does between `fork` and
//! `execve` allocates (everything is prepared before the fork), so no allocation of the
//! launcher is counted against the command.

use std::{
    ffi::{CString, OsStr, OsString},
    os::fd::{AsRawFd, OwnedFd},
    os::unix::ffi::{OsStrExt, OsStringExt},
    path::{Path, PathBuf},
    process::Command,
};

use nix::unistd::{ForkResult, Pid, fork, pipe2};

use crate::error::{Error, Result, SpawnFailure};

/// What to run: program, arguments, environment changes, directory, identity.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    /// The program, a path or a name looked up in PATH.
    pub program: OsString,
    /// Arguments after `argv[0]`.
    pub args: Vec<OsString>,
    /// Environment changes on top of this process's environment (None: remove).
    pub env: Vec<(OsString, Option<OsString>)>,
    /// Working directory (None: this process's).
    pub cwd: Option<PathBuf>,
    /// Run as this (uid, gid) instead of this process's identity (e.g. the invoking user
    /// of `sudo`).
    pub run_as: Option<(u32, u32)>,
    /// File descriptors to hand over: (fd number in the command, open fd in this
    /// process). The caller keeps its fds open until the command has started.
    pub fds: Vec<(i32, i32)>,
}

impl CommandSpec {
    /// A command with no arguments.
    pub fn new(program: impl Into<OsString>) -> Self {
        CommandSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            run_as: None,
            fds: Vec::new(),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the command.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Makes this process's open file descriptor `parent_fd` the command's `child_fd`.
    pub fn fd(mut self, child_fd: i32, parent_fd: i32) -> Self {
        self.fds.push((child_fd, parent_fd));
        self
    }

    /// The command line as strings (argv), for reports.
    pub fn argv_lossy(&self) -> Vec<String> {
        std::iter::once(&self.program)
            .chain(self.args.iter())
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }
}

impl From<&Command> for CommandSpec {
    fn from(cmd: &Command) -> Self {
        CommandSpec {
            program: cmd.get_program().to_os_string(),
            args: cmd.get_args().map(OsStr::to_os_string).collect(),
            env: cmd
                .get_envs()
                .map(|(k, v)| (k.to_os_string(), v.map(OsStr::to_os_string)))
                .collect(),
            cwd: cmd.get_current_dir().map(Path::to_path_buf),
            run_as: None,
            fds: Vec::new(),
        }
    }
}

impl From<Command> for CommandSpec {
    fn from(cmd: Command) -> Self {
        CommandSpec::from(&cmd)
    }
}

impl From<&mut Command> for CommandSpec {
    fn from(cmd: &mut Command) -> Self {
        CommandSpec::from(&*cmd)
    }
}

/// Finds `program` the way a shell would: as given when it contains a slash, else in
/// the directories of `path_var`.
pub(crate) fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let is_executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    let path_var = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path_var)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

/// Most file descriptors [`CommandSpec::fd`] can hand over.
const MAX_FDS: usize = 16;

/// A forked child, waiting for [`HeldChild::release`] before its exec.
pub(crate) struct HeldChild {
    /// The child's pid.
    pub pid: Pid,
    /// Read end of the exec-error pipe: empty at EOF when exec succeeded, 4 bytes of
    /// errno when it failed.
    pub exec_error: OwnedFd,
    /// Write end of the pipe the child waits on (None once released).
    go: Option<OwnedFd>,
}

impl HeldChild {
    /// Lets the child go on to its exec (once it is seized).
    pub(crate) fn release(&mut self) {
        if let Some(go) = self.go.take() {
            // An error (the child is gone) shows as its exit, seen next.
            let _ = nix::unistd::write(&go, &[1u8]);
        }
    }
}

fn cstring(s: &OsStr, what: &'static str, command: &str) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| Error::Spawn {
        command: command.to_string(),
        cause: SpawnFailure::NulByte(what),
    })
}

/// Forks the command; the child waits for [`HeldChild::release`] (or for this process
/// to end) before `execve`. Must be called on the thread that will trace it (it becomes
/// that thread's child).
pub(crate) fn fork_held(spec: &CommandSpec) -> Result<HeldChild> {
    let command = spec.program.to_string_lossy().into_owned();
    if spec.fds.len() > MAX_FDS {
        return Err(Error::Spawn {
            command,
            cause: SpawnFailure::TooManyFds(MAX_FDS),
        });
    }
    // The environment the command will see.
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (key, value) in &spec.env {
        env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            env.push((key.clone(), value.clone()));
        }
    }
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = resolve_program(&spec.program, path_var).ok_or_else(|| {
        if spec.program.as_bytes().contains(&b'/') && Path::new(&spec.program).exists() {
            Error::NotExecutable {
                command: command.clone(),
            }
        } else {
            Error::CommandNotFound {
                command: command.clone(),
            }
        }
    })?;

    // Everything the child needs is allocated now: after fork it may only make
    // async-signal-safe calls.
    let c_program = cstring(program.as_os_str(), "program path", &command)?;
    let mut argv = vec![cstring(&spec.program, "argument", &command)?];
    for arg in &spec.args {
        argv.push(cstring(arg, "argument", &command)?);
    }
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp = Vec::with_capacity(env.len());
    for (k, v) in &env {
        let mut kv = k.clone().into_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(CString::new(kv).map_err(|_| Error::Spawn {
            command: command.clone(),
            cause: SpawnFailure::NulByte("environment"),
        })?);
    }
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    let cwd = match &spec.cwd {
        Some(dir) => Some(cstring(dir.as_os_str(), "directory", &command)?),
        None => None,
    };
    let os = |what| {
        let command = command.clone();
        move |source| Error::Spawn {
            command,
            cause: SpawnFailure::Os { what, source },
        }
    };
    let (err_read, err_write) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(os("pipe"))?;
    let (go_read, go_write) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(os("pipe"))?;

    // SAFETY: the child only makes async-signal-safe calls (no allocation, no locks)
    // before execve or _exit.
    match unsafe { fork() } {
        Err(e) => Err(os("fork")(e)),
        Ok(ForkResult::Child) => unsafe {
            let fail = |fd: i32| -> ! {
                let errno = *libc::__errno_location();
                let bytes = errno.to_ne_bytes();
                libc::write(fd, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127)
            };
            // Only the tracer may hold the write end: end-of-file must mean it is gone.
            libc::close(go_write.as_raw_fd());
            // Move every fd we still need above the targets first, so no mapping can
            // clobber another's source (or the error pipe).
            let wfd = libc::fcntl(err_write.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 64);
            let gofd = libc::fcntl(go_read.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 64);
            if wfd < 0 || gofd < 0 {
                libc::_exit(127);
            }
            let mut high = [-1i32; MAX_FDS];
            for (i, &(_, parent_fd)) in spec.fds.iter().enumerate() {
                high[i] = libc::fcntl(parent_fd, libc::F_DUPFD_CLOEXEC, 64);
                if high[i] < 0 {
                    fail(wfd);
                }
            }
            for (i, &(child_fd, _)) in spec.fds.iter().enumerate() {
                if libc::dup2(high[i], child_fd) < 0 {
                    fail(wfd);
                }
            }
            // Undo what this (Rust) process changed: SIGPIPE is ignored by the Rust
            // runtime, and a harness thread may have blocked signals.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            if let Some(dir) = &cwd
                && libc::chdir(dir.as_ptr()) != 0
            {
                fail(wfd);
            }
            if let Some((uid, gid)) = spec.run_as {
                let groups = [gid];
                if libc::setgroups(1, groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    fail(wfd);
                }
            }
            // Wait for the tracer: a byte once it has seized this process, end-of-file
            // if it died first (then run the command untracked).
            let mut byte = 0u8;
            while libc::read(gofd, (&raw mut byte).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            libc::close(gofd);
            libc::execve(c_program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            fail(wfd)
        },
        Ok(ForkResult::Parent { child }) => {
            drop(err_write);
            drop(go_read);
            Ok(HeldChild {
                pid: child,
                exec_error: err_read,
                go: Some(go_write),
            })
        }
    }
}

/// Reads the exec-error pipe after the child exec'd or exited: the errno it reported.
pub(crate) fn exec_errno(fd: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let n = nix::unistd::read(fd, &mut buf).ok()?;
    (n == 4).then(|| i32::from_ne_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_in_path() {
        let found = resolve_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin")));
        assert_eq!(found, Some(PathBuf::from("/bin/sh")));
        assert_eq!(
            resolve_program(OsStr::new("definitely-not-a-command-xyz"), None),
            None
        );
        assert_eq!(resolve_program(OsStr::new("/nonexistent"), None), None);
        assert_eq!(
            resolve_program(OsStr::new("/bin/sh"), None),
            Some(PathBuf::from("/bin/sh"))
        );
    }

    #[test]
    fn spec_from_command_keeps_args_and_env() {
        let mut cmd = Command::new("prog");
        cmd.arg("a").arg("b").env("K", "V").env_remove("R");
        let spec = CommandSpec::from(&cmd);
        assert_eq!(spec.argv_lossy(), vec!["prog", "a", "b"]);
        assert!(spec.env.contains(&("K".into(), Some("V".into()))));
        assert!(spec.env.contains(&("R".into(), None)));
    }
}
