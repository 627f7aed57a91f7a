//! Collectives of a [`Comm`] with a configuration for the call alone (NCCL 2.31.2+: the
//! `nccl…Config` entry points): the algorithm, protocol or CTA bounds of one operation
//! ([`CollConfig`]), checked before NCCL like the operation itself; an older library is
//! refused with the reason.

use crate::comm::Comm;
use crate::element::{host_op, Element};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{CommOp, ReduceOp, Result};

impl Comm {
    /// [`Comm::all_reduce`] under `cfg`.
    pub fn all_reduce_configured<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        cfg: &CollConfig,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on_with(
            Some(send),
            Some(recv),
            |s, r| CommOp::all_reduce(s, r, T::DTYPE, op),
            Some(cfg),
        )
    }

    /// [`Comm::broadcast`] under `cfg`.
    pub fn broadcast_configured<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: u32,
        cfg: &CollConfig,
    ) -> Result<()> {
        self.run_on_with(
            Some(send),
            Some(recv),
            |s, r| CommOp::broadcast(s, r, T::DTYPE, root),
            Some(cfg),
        )
    }

    /// [`Comm::all_gather`] under `cfg`.
    pub fn all_gather_configured<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        cfg: &CollConfig,
    ) -> Result<()> {
        self.run_on_with(
            Some(send),
            Some(recv),
            |s, r| CommOp::all_gather(s, r, T::DTYPE),
            Some(cfg),
        )
    }

    /// [`Comm::reduce_scatter`] under `cfg`.
    pub fn reduce_scatter_configured<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        cfg: &CollConfig,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on_with(
            Some(send),
            Some(recv),
            |s, r| CommOp::reduce_scatter(s, r, T::DTYPE, op),
            Some(cfg),
        )
    }
}
