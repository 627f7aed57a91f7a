//! NCCL's memory: cudarc device slices, ordered by cudarc's own event tracking.

use super::memory::{Buffer, Memory};
use super::nccl_buf::{NcclAccess, NcclBuf};
use crate::element::Element;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice};
use oxccl_core::{Device, Error, RawBuf, RawBufMut, Result};
use oxccl_nccl::{cuda_error, NcclBackend, NcclStream};
use std::sync::Arc;

impl<T: Element> Buffer<T> for CudaSlice<T> {
    fn len(&self) -> usize {
        DeviceSlice::len(self)
    }
}

impl Memory for NcclBackend {
    type Buf<T: Element> = CudaSlice<T>;
    type CommBuf<T: Element> = NcclBuf<T>;
    type Access<'a> = NcclAccess<'a>;

    fn require_devices(&self) -> Result<()> {
        oxccl_nccl::require_driver()
    }

    fn end_access(access: NcclAccess<'_>, end: &oxccl_nccl::NcclEvent) {
        match access {
            NcclAccess::Comm(u) => u.end_with(end),
            // cudarc records the slice's own events: it keeps no other.
            NcclAccess::Slice(s) => drop(s),
        }
    }

    fn stream(&self, device: Device) -> Result<NcclStream> {
        oxccl_nccl::require_driver()?;
        let ctx =
            CudaContext::new(device.0 as usize).map_err(|e| cuda_error("opening the device", e))?;
        NcclStream::create(&ctx)
    }

    fn alloc_zeros<T: Element>(&self, stream: &NcclStream, len: usize) -> Result<CudaSlice<T>> {
        stream
            .cuda()
            .alloc_zeros::<T>(len)
            .map_err(|e| cuda_error("allocating device memory", e))
    }

    fn upload<T: Element>(&self, stream: &NcclStream, data: &[T]) -> Result<CudaSlice<T>> {
        stream
            .cuda()
            .clone_htod(data)
            .map_err(|e| cuda_error("copying to the device", e))
    }

    fn alloc_comm<T: Element>(&self, stream: &NcclStream, len: usize) -> Result<NcclBuf<T>> {
        NcclBuf::zeros(self, stream, len)
    }

    fn upload_comm<T: Element>(&self, stream: &NcclStream, data: &[T]) -> Result<NcclBuf<T>> {
        NcclBuf::from_host(self, stream, data)
    }

    fn download<T: Element>(&self, stream: &NcclStream, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        stream
            .cuda()
            .clone_dtoh(buf)
            .map_err(|e| cuda_error("copying from the device", e))
    }

    fn has_nan<T: Element>(&self, stream: &NcclStream, buf: &CudaSlice<T>) -> Result<bool> {
        super::nan::has_nan(stream, buf)
    }

    fn read<'a, T: Element>(
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
        buf: &'a CudaSlice<T>,
    ) -> Result<(RawBuf, NcclAccess<'a>)> {
        same_device(arg, device, buf, stream.cuda())?;
        let (ptr, sync) = buf.device_ptr(stream.cuda());
        Ok((
            RawBuf::new(ptr as usize, DeviceSlice::len(buf)),
            NcclAccess::Slice(sync),
        ))
    }

    fn write<'a, T: Element>(
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
        buf: &'a mut CudaSlice<T>,
    ) -> Result<(RawBufMut, NcclAccess<'a>)> {
        same_device(arg, device, buf, stream.cuda())?;
        let len = DeviceSlice::len(buf);
        let (ptr, sync) = buf.device_ptr_mut(stream.cuda());
        Ok((RawBufMut::new(ptr as usize, len), NcclAccess::Slice(sync)))
    }
}

/// `s` lives on the communicator's device. Memory allocated on the communicator's own stream
/// (the common case) is recognised by pointer, without reading the context.
pub(crate) fn same_device<T>(
    arg: &'static str,
    dev: Device,
    s: &impl DeviceSlice<T>,
    st: &CudaStream,
) -> Result<()> {
    if std::ptr::eq(Arc::as_ptr(s.stream()), st) {
        return Ok(());
    }
    let ordinal = s.stream().context().ordinal();
    if ordinal != dev.0 as usize {
        return Err(Error::invalid(
            arg,
            format_args!(
                "memory on the communicator's device {}, got device {ordinal}",
                dev.0
            ),
        ));
    }
    Ok(())
}
