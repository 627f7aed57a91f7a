//! Subgroups: every rank of a group calls `new_group` in the same order (members and
//! non-members alike), so uids agree and a split can be collective over the parent.

use super::backend::PgBackend;
use super::build::GroupSpec;
use super::inner::PgInner;
use super::inner::ProcessGroup;
use super::options::PgOptions;
use oxccl_core::{text, Error, Result};
use oxccl_rules::membership::{self, CommPlan};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<B: PgBackend> ProcessGroup<B> {
    /// A subgroup of the global ranks `ranks` (c10d's `new_group`; they are sorted, and the
    /// group rank is the index). Every rank of this group must call it, in the same order. A
    /// rank outside `ranks` gets a group whose operations are refused ("not part of group").
    ///
    /// Its communicator is split from this group's at once when a device is bound and
    /// communicators are blocking (non-members take part with no color), split at its first
    /// operation when every rank of this group is a member, and otherwise made by the members
    /// alone through the store at its first operation.
    pub fn new_group(&self, ranks: &[u32], opts: Option<PgOptions>) -> Result<ProcessGroup<B>> {
        let inner = &self.inner();
        membership::check_ranks(inner.world_size, ranks)?;
        if let Some(r) = ranks.iter().find(|r| !inner.ranks.contains(r)) {
            return Err(Error::invalid(
                "ranks",
                format_args!("ranks of the parent group {}, got {r}", inner.uid),
            ));
        }
        let mut ranks = ranks.to_vec();
        ranks.sort_unstable();
        let mut opts = opts.unwrap_or_else(|| PgOptions {
            desc: String::from("undefined"),
            ..inner.opts.clone()
        });
        if opts.bound_device.is_none() {
            opts.bound_device = inner.opts.bound_device;
        }
        if opts.recorder.is_none() {
            opts.recorder = Some(inner.watch.recorder.clone());
        }
        let plan = membership::comm_plan(
            inner.can_split() && inner.rank.is_some(),
            opts.bound_device.is_some(),
            opts.config.is_nonblocking(),
            inner.ranks.len() as u32,
            ranks.len() as u32,
        );
        let epoch = inner.epoch.load(Ordering::Acquire);
        let uid = oxccl_rules::elastic::uid_at(
            inner.family.next_uid.fetch_add(1, Ordering::Relaxed),
            epoch,
        );
        let member = ranks.contains(&inner.global_rank);
        let child = ProcessGroup {
            root: PgInner::build(GroupSpec {
                backend: inner.backend.clone(),
                store: inner.store.clone(),
                family: inner.family.clone(),
                uid,
                global_rank: inner.global_rank,
                world_size: inner.world_size,
                ranks,
                opts,
                parent: Some(Arc::clone(inner)),
                plan,
                epoch,
            }),
        };
        if plan == CommPlan::SplitNow {
            if member {
                child.inner().with_entry("new_group", |_| Ok(()))?;
            } else {
                // A split is collective over the parent: a non-member takes part, and gets none.
                if let Some(c) =
                    inner.split(None, inner.member_rank()?, &child.inner().opts.config)?
                {
                    drop(c);
                    return Err(Error::Remote {
                        detail: text!("a split without color gave this rank a communicator"),
                    });
                }
            }
        }
        Ok(child)
    }

    /// Contiguous subgroups of `group_size` ranks (c10d's `new_subgroups`): returns this rank's
    /// subgroup and all of them. `group_size` must divide this group's size.
    pub fn new_subgroups(
        &self,
        group_size: u32,
    ) -> Result<(ProcessGroup<B>, Vec<ProcessGroup<B>>)> {
        let n = self.size();
        membership::subgroup_block(n, group_size, 0)?;
        let blocks: Vec<Vec<u32>> = (0..n / group_size)
            .map(|b| {
                self.inner().ranks[(b * group_size) as usize..((b + 1) * group_size) as usize]
                    .to_vec()
            })
            .collect();
        self.new_subgroups_by_enumeration(&blocks)
    }

    /// Subgroups of the listed global ranks (c10d's `new_subgroups_by_enumeration`): a rank in
    /// two of them is an error. Returns this rank's subgroup and all of them.
    pub fn new_subgroups_by_enumeration(
        &self,
        ranks_per_subgroup: &[Vec<u32>],
    ) -> Result<(ProcessGroup<B>, Vec<ProcessGroup<B>>)> {
        membership::check_enumeration(
            self.inner().world_size,
            ranks_per_subgroup.iter().map(Vec::as_slice),
        )?;
        let mut all = Vec::with_capacity(ranks_per_subgroup.len());
        for ranks in ranks_per_subgroup {
            all.push(self.new_group(ranks, None)?);
        }
        let mine = all
            .iter()
            .find(|g| g.rank().is_some())
            .cloned()
            .ok_or_else(|| {
                Error::invalid(
                    "ranks_per_subgroup",
                    format_args!("a subgroup holding rank {}", self.inner().global_rank),
                )
            })?;
        Ok((mine, all))
    }

    /// The group rank of global rank `global` in this group: "not part of group" when it is
    /// not a member, "not registered" once the group was destroyed.
    pub fn group_rank_of(&self, global: u32) -> Result<u32> {
        self.registered()?;
        membership::group_rank(&self.inner().ranks, global).ok_or_else(|| {
            Error::invalid(
                "global_rank",
                format_args!(
                    "a rank of group {} {:?}: global rank {global} is not part of group",
                    self.inner().uid,
                    self.inner().ranks
                ),
            )
        })
    }

    /// The global rank of group rank `group_rank`.
    pub fn global_rank_of(&self, group_rank: u32) -> Result<u32> {
        self.registered()?;
        self.inner()
            .ranks
            .get(group_rank as usize)
            .copied()
            .ok_or_else(|| {
                Error::invalid(
                    "group_rank",
                    format_args!(
                        "a rank below the size {} of group {}, got {group_rank}",
                        self.inner().ranks.len(),
                        self.inner().uid
                    ),
                )
            })
    }

    fn registered(&self) -> Result<()> {
        if self.comm_state() == Some(oxccl_core::CommState::Destroyed) {
            return Err(Error::invalid(
                "group",
                format_args!(
                    "a registered group: group {} is not registered (destroyed)",
                    self.inner().uid
                ),
            ));
        }
        Ok(())
    }
}
