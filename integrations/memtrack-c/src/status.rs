//! Status codes and the calling thread's last error message.
//!
//! Every call returns a status ([`Status`]); a call that fails leaves why in a buffer of
//! the calling thread, read with `memtrack_last_error`. The buffer is a fixed array in
//! thread-local storage, so that recording an error allocates nothing: a call refused
//! while another thread measures a region must not add to that region's counts.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int};
use std::fmt::{self, Write};

/// What a call of the C ABI did. The numbers are the ABI (`memtrack.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// Not under `memtrack run` (`MEMTRACK_FIFO_DIR` unset or empty): nothing done.
    Inactive = 1,
    /// A bad argument: a NULL pointer, text that is not UTF-8, a uri too long to send.
    Invalid = -1,
    /// Not possible in this library's state: a region already open, or none open by
    /// this thread of this process.
    State = -2,
    /// The runner refused the command (its message says why).
    Rejected = -3,
    /// The runner could not be reached, went away, did not answer in time, or answered
    /// something this library cannot read.
    Runner = -4,
    /// The runner speaks no protocol version this library speaks.
    Version = -5,
    /// Another thread held the library's lock for the whole timeout (5 s), or a `fork`
    /// copied it held.
    Busy = -6,
}

impl Status {
    /// The code returned to C.
    pub fn code(self) -> c_int {
        self as c_int
    }

    /// The constant's name in `memtrack.h`, NUL-terminated.
    pub fn name(code: c_int) -> &'static CStr {
        match code {
            0 => c"MEMTRACK_OK",
            1 => c"MEMTRACK_INACTIVE",
            -1 => c"MEMTRACK_ERR_INVALID",
            -2 => c"MEMTRACK_ERR_STATE",
            -3 => c"MEMTRACK_ERR_REJECTED",
            -4 => c"MEMTRACK_ERR_RUNNER",
            -5 => c"MEMTRACK_ERR_VERSION",
            -6 => c"MEMTRACK_ERR_BUSY",
            _ => c"MEMTRACK_UNKNOWN_STATUS",
        }
    }
}

/// Capacity of a thread's message buffer in bytes, its NUL terminator included; longer
/// messages are cut at a character boundary and end with "...".
const CAPACITY: usize = 1024;

/// One thread's last message: NUL-terminated UTF-8 in `bytes[..=len]`.
struct Message {
    len: usize,
    /// The message did not fit and ends with "...": later pieces are dropped.
    cut: bool,
    bytes: [u8; CAPACITY],
}

impl Write for Message {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Ok(());
        }
        let room = CAPACITY - 1 - self.len;
        if s.len() <= room {
            self.bytes[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
        } else {
            // Keep what fits with room for "...", cut at a character boundary.
            let mut take = room.saturating_sub(3);
            while !s.is_char_boundary(take) {
                take -= 1;
            }
            let mut end = self.len + take;
            self.bytes[self.len..end].copy_from_slice(&s.as_bytes()[..take]);
            if take == 0 {
                // Nothing of `s` fits: back off over whole characters already written.
                end = end.min(CAPACITY - 4);
                while end > 0 && (self.bytes[end] & 0xc0) == 0x80 {
                    end -= 1;
                }
            }
            self.bytes[end..end + 3].copy_from_slice(b"...");
            self.len = end + 3;
            self.cut = true;
        }
        self.bytes[self.len] = 0;
        Ok(())
    }
}

thread_local! {
    // Const-initialised and without a destructor: no allocation, no registration.
    static LAST: RefCell<Message> = const {
        RefCell::new(Message {
            len: 0,
            cut: false,
            bytes: [0; CAPACITY],
        })
    };
}

/// Replaces the calling thread's message with `args` (no allocation).
pub fn set_message(args: fmt::Arguments<'_>) {
    let _ = LAST.try_with(|last| {
        if let Ok(mut m) = last.try_borrow_mut() {
            m.len = 0;
            m.cut = false;
            m.bytes[0] = 0;
            let _ = m.write_fmt(args);
        }
    });
}

/// Records `args` as the calling thread's message and returns `status`.
pub fn fail(status: Status, args: fmt::Arguments<'_>) -> Status {
    set_message(args);
    status
}

/// Clears the calling thread's message (a call that succeeded).
pub fn clear() {
    set_message(format_args!(""));
}

/// The calling thread's message, valid until its next call of the library.
pub fn last_message() -> *const c_char {
    LAST.try_with(|last| {
        // SAFETY: a pointer to a field of this thread's buffer, which lives as long as the
        // thread; no reference is made.
        unsafe { std::ptr::addr_of!((*last.as_ptr()).bytes) }.cast::<c_char>()
    })
    .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> String {
        // SAFETY: last_message points at this thread's NUL-terminated buffer.
        unsafe { CStr::from_ptr(last_message()) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn messages_are_kept_whole_or_cut_with_dots() {
        assert_eq!(message(), "");
        fail(Status::Rejected, format_args!("runner said {}", "no"));
        assert_eq!(message(), "runner said no");
        let long = "é".repeat(2000);
        set_message(format_args!("{long} and more"));
        let cut = message();
        assert!(cut.ends_with("..."), "{cut}");
        assert!(
            cut.len() < CAPACITY && cut.len() >= CAPACITY - 5,
            "{}",
            cut.len()
        );
        assert!(cut.trim_end_matches("...").chars().all(|c| c == 'é'));
        // Pieces: one that fits, one that does not, one after the cut.
        let a = "a".repeat(CAPACITY - 2);
        set_message(format_args!("{a}{}{}", "éé", "tail"));
        let cut = message();
        assert!(cut.ends_with("a..."), "{cut}");
        assert_eq!(cut.len(), CAPACITY - 1);
        clear();
        assert_eq!(message(), "");
    }

    #[test]
    fn every_status_has_its_name() {
        for (status, name) in [
            (Status::Ok, "MEMTRACK_OK"),
            (Status::Inactive, "MEMTRACK_INACTIVE"),
            (Status::Invalid, "MEMTRACK_ERR_INVALID"),
            (Status::State, "MEMTRACK_ERR_STATE"),
            (Status::Rejected, "MEMTRACK_ERR_REJECTED"),
            (Status::Runner, "MEMTRACK_ERR_RUNNER"),
            (Status::Version, "MEMTRACK_ERR_VERSION"),
            (Status::Busy, "MEMTRACK_ERR_BUSY"),
        ] {
            assert_eq!(Status::name(status.code()).to_str().unwrap(), name);
        }
        assert_eq!(
            Status::name(42).to_str().unwrap(),
            "MEMTRACK_UNKNOWN_STATUS"
        );
    }
}
