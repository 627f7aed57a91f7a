//! [`TensorGroup`]: a process group's collectives on candle tensors.

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl::{Element, ReduceOp};

/// Runs `$body` with `$t` the Rust type of `$dtype`, or returns the typed error naming `$arg`
/// for a dtype NCCL has no type for.
macro_rules! with_elem {
    ($dtype:expr, $arg:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::U8 => {
                type $t = u8;
                $body
            }
            DType::U32 => {
                type $t = u32;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            DType::F16 => {
                type $t = half::f16;
                $body
            }
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::F8E4M3 => {
                type $t = float8::F8E4M3;
                $body
            }
            other => {
                return Err(Error::DType {
                    arg: $arg,
                    dtype: other,
                    why: "has no NCCL type",
                })
            }
        }
    };
}
pub(crate) use with_elem;

/// Words of a tensor's header: dtype, rank of the shape, up to [`DIMS`] dimensions, numel.
const HEADER: usize = 3 + DIMS;
/// Dimensions a header spells out; a longer shape is compared by its numel and the rest.
const DIMS: usize = 8;

/// A process group's collectives on candle tensors, for every dtype both have (U8, U32, I32,
/// I64, BF16, F16, F32, F64, F8E4M3).
///
/// Tensors are values in candle, so every collective returns a new tensor on the input's
/// device. CPU tensors go through the group's own buffers (a copy each way), on either
/// backend; CUDA tensors need the `cuda` feature and an NCCL group (not yet built, see
/// `cuda.rs`).
///
/// Before a collective whose tensors must agree across ranks, the ranks compare dtype and
/// shape (one small all-gather), so a rank that disagrees is an [`Error::Mismatch`] naming it
/// rather than a hang or wrong numbers; [`TensorGroup::unchecked`] turns that off for hot loops
/// once a program is known good.
#[derive(Clone)]
pub struct TensorGroup<B: PgBackend> {
    pg: ProcessGroup<B>,
    check: bool,
}

impl<B: PgBackend> std::fmt::Debug for TensorGroup<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorGroup")
            .field("rank", &self.pg.global_rank())
            .field("size", &self.pg.size())
            .field("check", &self.check)
            .finish()
    }
}

impl<B: PgBackend> TensorGroup<B> {
    /// Collectives of `pg` on tensors, with the cross-rank shape check on.
    pub fn new(pg: ProcessGroup<B>) -> TensorGroup<B> {
        TensorGroup { pg, check: true }
    }

    /// The same group without the cross-rank dtype and shape check (one fewer collective per
    /// call; a disagreement then surfaces as the backend's error, or a wrong shape).
    pub fn unchecked(mut self) -> TensorGroup<B> {
        self.check = false;
        self
    }

    /// The process group underneath.
    pub fn pg(&self) -> &ProcessGroup<B> {
        &self.pg
    }

    /// This rank's index in the group (0 for a rank outside it never happens: a
    /// `TensorGroup` is made from a group its rank belongs to).
    pub fn rank(&self) -> usize {
        self.pg.rank().unwrap_or(0) as usize
    }

    /// Ranks in the group.
    pub fn size(&self) -> usize {
        self.pg.size() as usize
    }

    /// The group's global rank of group rank `r`.
    fn global(&self, r: usize) -> u32 {
        self.pg.ranks().get(r).copied().unwrap_or(r as u32)
    }

    /// Reduces `x` across ranks with `op` (every rank passes the same dtype and shape).
    pub fn all_reduce(&self, x: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.agree("x", x)?;
        with_elem!(x.dtype(), "x", T => {
            let mut buf = self.pg.upload(&host::<T>(x, "x")?)?;
            self.pg.all_reduce(&mut buf, op)?.wait()?;
            let v = self.pg.download(&buf)?;
            Ok(Tensor::from_vec(v, x.shape(), x.device())?)
        })
    }

    /// Rank `root`'s `x` (a global rank), on every rank; every rank passes a tensor of the
    /// same dtype and shape, whose values only matter on `root`.
    pub fn broadcast(&self, x: &Tensor, root: usize) -> Result<Tensor> {
        self.rank_arg("root", root)?;
        self.agree("x", x)?;
        with_elem!(x.dtype(), "x", T => {
            let mut buf = self.pg.upload(&host::<T>(x, "x")?)?;
            self.pg.broadcast(&mut buf, root as u32)?.wait()?;
            let v = self.pg.download(&buf)?;
            Ok(Tensor::from_vec(v, x.shape(), x.device())?)
        })
    }

    /// Every rank's `x`, concatenated along `dim` in group-rank order (same shape everywhere).
    pub fn all_gather(&self, x: &Tensor, dim: usize) -> Result<Tensor> {
        dim_arg("dim", x, dim)?;
        self.agree("x", x)?;
        let n = self.size();
        let flat = with_elem!(x.dtype(), "x", T => {
            let send = self.pg.upload(&host::<T>(x, "x")?)?;
            let mut recv = self.pg.alloc_zeros::<T>(x.elem_count() * n)?;
            self.pg.all_gather(&send, &mut recv)?.wait()?;
            let v = self.pg.download(&recv)?;
            Tensor::from_vec(v, x.elem_count() * n, x.device())?
        });
        // Rank-major parts, each of `x`'s shape: stack along a new leading dimension, then
        // put the parts where `dim` is.
        let mut parts_shape = vec![n];
        parts_shape.extend_from_slice(x.dims());
        let parts = flat.reshape(parts_shape)?;
        let parts: Vec<Tensor> = (0..n)
            .map(|r| parts.get(r))
            .collect::<candle_core::Result<_>>()?;
        Ok(Tensor::cat(&parts, dim)?)
    }

    /// Reduces `x` across ranks with `op` and keeps this rank's part of it: `x` split evenly
    /// along `dim` into `size` parts, group rank r keeping part r.
    pub fn reduce_scatter(&self, x: &Tensor, dim: usize, op: ReduceOp) -> Result<Tensor> {
        let parts = self.split("x", x, dim)?;
        self.agree("x", x)?;
        let part_shape = parts[0].shape().clone();
        let rank_major = Tensor::cat(
            &parts
                .iter()
                .map(|p| p.flatten_all())
                .collect::<candle_core::Result<Vec<_>>>()?,
            0,
        )?;
        with_elem!(x.dtype(), "x", T => {
            let send = self.pg.upload(&host::<T>(&rank_major, "x")?)?;
            let mut recv = self.pg.alloc_zeros::<T>(part_shape.elem_count())?;
            self.pg.reduce_scatter(&send, &mut recv, op)?.wait()?;
            let v = self.pg.download(&recv)?;
            Ok(Tensor::from_vec(v, part_shape, x.device())?)
        })
    }

    /// `x` split evenly along `dim` into `size` parts, part p sent to group rank p; the parts
    /// received, concatenated along `dim` in group-rank order (same shape everywhere).
    pub fn all_to_all(&self, x: &Tensor, dim: usize) -> Result<Tensor> {
        let parts = self.split("x", x, dim)?;
        self.agree("x", x)?;
        let part_shape = parts[0].dims().to_vec();
        let rank_major = Tensor::cat(
            &parts
                .iter()
                .map(|p| p.flatten_all())
                .collect::<candle_core::Result<Vec<_>>>()?,
            0,
        )?;
        let flat = with_elem!(x.dtype(), "x", T => {
            let send = self.pg.upload(&host::<T>(&rank_major, "x")?)?;
            let mut recv = self.pg.alloc_zeros::<T>(x.elem_count())?;
            self.pg.all_to_all(&send, &mut recv)?.wait()?;
            let v = self.pg.download(&recv)?;
            Tensor::from_vec(v, x.elem_count(), x.device())?
        });
        let mut shape = vec![self.size()];
        shape.extend_from_slice(&part_shape);
        let got = flat.reshape(shape)?;
        let got: Vec<Tensor> = (0..self.size())
            .map(|r| got.get(r))
            .collect::<candle_core::Result<_>>()?;
        Ok(Tensor::cat(&got, dim)?)
    }

    /// Sends `x` to global rank `dst`, which takes it with [`TensorGroup::recv`]: its dtype and
    /// shape travel with it.
    pub fn send(&self, x: &Tensor, dst: usize) -> Result<()> {
        self.peer_arg("dst", dst)?;
        let header = self.pg.upload(&header("x", x)?)?;
        self.pg.send(&header, dst as u32)?.wait()?;
        with_elem!(x.dtype(), "x", T => {
            let buf = self.pg.upload(&host::<T>(x, "x")?)?;
            self.pg.send(&buf, dst as u32)?.wait()?;
        });
        Ok(())
    }

    /// The tensor global rank `src` sends with [`TensorGroup::send`], on `device`.
    pub fn recv(&self, src: usize, device: &Device) -> Result<Tensor> {
        self.peer_arg("src", src)?;
        let mut hbuf = self.pg.alloc_zeros::<u64>(HEADER)?;
        self.pg.recv(&mut hbuf, src as u32)?.wait()?;
        let h = self.pg.download(&hbuf)?;
        let (dtype, dims) = from_header(&h).ok_or_else(|| {
            Error::invalid(
                "src",
                format!("rank {src} sent a header this build cannot read: {h:?}"),
            )
        })?;
        with_elem!(dtype, "src", T => {
            let numel = dims.iter().product();
            let mut buf = self.pg.alloc_zeros::<T>(numel)?;
            self.pg.recv(&mut buf, src as u32)?.wait()?;
            let v = self.pg.download(&buf)?;
            Ok(Tensor::from_vec(v, dims, device)?)
        })
    }

    /// Waits until every rank of the group is here.
    pub fn barrier(&self) -> Result<()> {
        self.pg.barrier()?.wait()?;
        Ok(())
    }

    /// `x` split evenly along `dim` into one part per rank.
    pub(crate) fn split(&self, arg: &'static str, x: &Tensor, dim: usize) -> Result<Vec<Tensor>> {
        dim_arg("dim", x, dim)?;
        let (len, n) = (x.dims()[dim], self.size());
        if !len.is_multiple_of(n) {
            return Err(Error::invalid(
                arg,
                format!(
                    "dimension {dim} of {:?} does not split into {n} equal parts",
                    x.dims()
                ),
            ));
        }
        let parts = x.chunk(n, dim)?;
        // candle gives fewer parts than asked along an empty dimension.
        if parts.len() != n {
            return Err(Error::invalid(
                arg,
                format!("dimension {dim} of {:?} is empty", x.dims()),
            ));
        }
        Ok(parts)
    }

    /// Compares `x`'s dtype and shape across ranks (when the check is on).
    pub(crate) fn agree(&self, arg: &'static str, x: &Tensor) -> Result<()> {
        device_arg(arg, x)?;
        if !self.check || self.size() == 1 {
            return Ok(());
        }
        let ours = header(arg, x)?;
        let send = self.pg.upload(&ours)?;
        let mut recv = self.pg.alloc_zeros::<u64>(HEADER * self.size())?;
        self.pg.all_gather(&send, &mut recv)?.wait()?;
        let all = self.pg.download(&recv)?;
        for (r, theirs) in all.chunks(HEADER).enumerate() {
            if theirs != ours.as_slice() {
                return Err(Error::Mismatch {
                    arg,
                    rank: self.global(r),
                    ours: describe(&ours),
                    theirs: describe(theirs),
                });
            }
        }
        Ok(())
    }

    fn rank_arg(&self, arg: &'static str, r: usize) -> Result<()> {
        if self.pg.ranks().contains(&(r as u32)) {
            Ok(())
        } else {
            Err(Error::invalid(
                arg,
                format!(
                    "global rank {r} is not in the group ({:?})",
                    self.pg.ranks()
                ),
            ))
        }
    }

    fn peer_arg(&self, arg: &'static str, r: usize) -> Result<()> {
        self.rank_arg(arg, r)?;
        if r as u32 == self.pg.global_rank() {
            return Err(Error::invalid(arg, format!("rank {r} is this rank")));
        }
        Ok(())
    }
}

/// A CPU tensor's elements in row-major order (a copy, whatever its layout).
pub(crate) fn host<T: Element + candle_core::WithDType>(
    x: &Tensor,
    arg: &'static str,
) -> Result<Vec<T>> {
    device_arg(arg, x)?;
    Ok(x.flatten_all()?.to_vec1::<T>()?)
}

/// Refuses tensors this build cannot move (CUDA without the `cuda` feature, Metal).
pub(crate) fn device_arg(arg: &'static str, x: &Tensor) -> Result<()> {
    match x.device() {
        Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => Ok(()),
        other => Err(Error::Device {
            arg,
            got: other.location(),
            expected: if cfg!(feature = "cuda") {
                "a CPU or CUDA tensor".into()
            } else {
                "a CPU tensor (CUDA tensors need oxccl-candle's `cuda` feature)".into()
            },
        }),
    }
}

fn dim_arg(arg: &'static str, x: &Tensor, dim: usize) -> Result<()> {
    if dim < x.rank() {
        Ok(())
    } else {
        Err(Error::invalid(
            arg,
            format!("dimension {dim} of a tensor of shape {:?}", x.dims()),
        ))
    }
}

fn dtype_code(d: DType) -> u64 {
    match d {
        DType::U8 => 1,
        DType::U32 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::BF16 => 5,
        DType::F16 => 6,
        DType::F32 => 7,
        DType::F64 => 8,
        DType::F8E4M3 => 9,
        _ => 0,
    }
}

fn dtype_of(code: u64) -> Option<DType> {
    [
        DType::U8,
        DType::U32,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
    ]
    .into_iter()
    .find(|d| dtype_code(*d) == code)
}

/// dtype, rank, dimensions (zero-padded), numel.
fn header(arg: &'static str, x: &Tensor) -> Result<Vec<u64>> {
    if dtype_code(x.dtype()) == 0 {
        return Err(Error::DType {
            arg,
            dtype: x.dtype(),
            why: "has no NCCL type",
        });
    }
    if x.rank() > DIMS {
        return Err(Error::Shape {
            arg,
            got: x.dims().to_vec(),
            expected: format!("at most {DIMS} dimensions"),
        });
    }
    let mut h = vec![0u64; HEADER];
    h[0] = dtype_code(x.dtype());
    h[1] = x.rank() as u64;
    for (i, d) in x.dims().iter().enumerate() {
        h[2 + i] = *d as u64;
    }
    h[HEADER - 1] = x.elem_count() as u64;
    Ok(h)
}

fn from_header(h: &[u64]) -> Option<(DType, Vec<usize>)> {
    let dtype = dtype_of(*h.first()?)?;
    let rank = usize::try_from(*h.get(1)?).ok()?;
    let dims = h.get(2..2 + rank)?.iter().map(|d| *d as usize).collect();
    Some((dtype, dims))
}

fn describe(h: &[u64]) -> String {
    match from_header(h) {
        Some((dtype, dims)) => format!("{dtype:?} {dims:?}"),
        None => format!("{h:?}"),
    }
}
