//! The elastic group's own calls (see [`super::PgOptions::elastic`]): a new process joining
//! a running world, the members admitting it, and the epoch a group is at.

use super::super::backend::PgBackend;
use super::super::build::GroupSpec;
use super::super::comm_slot::Slot;
use super::super::family::GroupFamily;
use super::super::inner::ProcessGroup;
use super::super::inner::{lock, PgInner};
use super::super::keys;
use super::super::options::default_group_options;
use super::super::options::PgOptions;
use super::{admit, monitor, roster};
use crate::store::Store;
use oxccl_core::{Error, Result};
use oxccl_rules::elastic::uid_at;
use oxccl_rules::membership::CommPlan;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

impl<B: PgBackend> ProcessGroup<B> {
    /// Joins a running elastic world as global rank `rank` (a replacement for a lost rank, or
    /// a new one): `size` is the world's size when it was made (it names the world's keys on
    /// `store`), `opts` must be elastic like the members'. Waits, up to the options' timeout,
    /// until the members call [`ProcessGroup::admit`]; the group is then the members and
    /// this process, at the epoch the admission made. Its communicator is made at the first
    /// operation, with the members' (they reach theirs at their next operation): a broadcast
    /// of the state the joiner needs is the usual first one.
    ///
    /// Refused with an [`Error::InvalidArgument`] naming `rank`, before this process counts
    /// itself anywhere in the store, for a rank not below `size` and for a rank that is a
    /// member and stays one until the timeout (a replacement started before the members
    /// decided the rank lost waits for their decision); and, by the verdict on its own ticket
    /// in the members' decision, for a rank another process asked for in the same admission
    /// (the earlier ticket takes it). A `size` no world on `store` was made with is an
    /// [`Error::InvalidArgument`] naming `size`; a world of that size that is not elastic
    /// (it published no members) a [`Error::Timeout`] saying so. None of these disturbs the
    /// members.
    pub fn join(
        backend: B,
        store: Arc<dyn Store>,
        rank: u32,
        size: u32,
        mut opts: PgOptions,
    ) -> Result<ProcessGroup<B>> {
        if !opts.elastic {
            return Err(Error::invalid(
                "opts",
                format_args!(
                    "elastic options (PgOptions::elastic): only an elastic world admits a process"
                ),
            ));
        }
        if size == 0 {
            return Err(Error::invalid(
                "size",
                format_args!("the size the running world was made with, got 0"),
            ));
        }
        if rank >= size {
            return Err(oxccl_rules::elastic::admission::outside(rank, size));
        }
        backend.require_devices()?;
        default_group_options(&mut opts);
        let store = keys::running(store, size)?;
        let admit::Admission {
            upto,
            epoch,
            members,
            grow,
            ..
        } = admit::wait_admitted(&*store, rank, size, opts.timeout)?;
        let world_size = members
            .iter()
            .map(|r| r + 1)
            .max()
            .unwrap_or(size)
            .max(size);
        let family = Arc::new(GroupFamily {
            next_uid: AtomicU64::new(1),
            elastic: Some(admit::joined_family(opts.elastic_window, epoch, upto)),
        });
        let root = PgInner::build(GroupSpec {
            backend,
            store,
            family,
            uid: uid_at(0, epoch),
            global_rank: rank,
            world_size,
            ranks: members,
            opts,
            parent: None,
            plan: CommPlan::InitOnFirstUse,
            epoch,
        });
        if grow {
            // The members grow their communicator: this rank joins it at its first operation.
            *lock(&root.slot) = Slot::JoinGrown;
        }
        monitor::start(&root);
        roster::start_beat(&root);
        let pg = ProcessGroup { root };
        pg.start_default(rank, world_size)?;
        Ok(pg)
    }

    /// Admits the processes waiting in [`ProcessGroup::join`], at a point every member of
    /// this elastic default group reaches alike (a step boundary): how many joined. With
    /// any, the group is at the next epoch from here, the joiners its members (ordered by
    /// global rank); its communicator is made anew at the next operation, collective with the
    /// joiners'. Subgroups made before keep their members; every member numbers the groups
    /// it makes from here alike, joiners included.
    pub fn admit(&self) -> Result<u32> {
        if self.inner().parent.is_some() {
            return Err(Error::invalid(
                "group",
                format_args!("the default group: processes join the world, not a subgroup"),
            ));
        }
        admit::admit(&self.root)
    }

    /// The survivors' epoch this group is at: 0 until its family first lost or admitted a
    /// rank, one more at each.
    pub fn epoch(&self) -> u64 {
        self.inner().epoch.load(Ordering::Acquire)
    }
}
