//! memtrack's runnable examples live in `src/bin/`; each file says at its top what it
//! shows and the one command that runs it. This library part holds only what two of
//! them share: [`probe_watch`], which sees whether a uprobe sits in the allocator.

pub mod probe_watch;
