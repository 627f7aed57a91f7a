//! A per-call configuration of one collective (NCCL 2.31+: the `nccl…Config` entry points'
//! `ncclCollConfig_t`): resource bounds, an algorithm selection and a profiler tag for this
//! call alone. Every rank must give the same; unset fields are NCCL's choice.

use crate::error::{Error, Result};
use crate::text::{text_str, Text};

/// One collective's configuration (see the module). `Default` sets nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollConfig {
    /// Lower bound on the CTAs (channels) the call uses.
    pub min_ctas: Option<u32>,
    /// Upper bound on the CTAs (at most the communicator's).
    pub max_ctas: Option<u32>,
    /// Cap on the NVLS pool's CTAs.
    pub nvls_ctas: Option<u32>,
    /// The CUDA thread-block-cluster size (Hopper+).
    pub cga_cluster_size: Option<u32>,
    /// NCCL's algorithm selection string (`"ring"`, `"tree"`, …); `None`: automatic.
    pub algorithms: Option<Text>,
    /// Whether a selection NCCL cannot satisfy is an error (NCCL's default) or ignored.
    pub force_algorithms: bool,
    /// `NCCL_CTA_POLICY_*` bits; `None`: the communicator's.
    pub cta_policy: Option<u32>,
    /// A tag handed to profiler plugins with this call's events (the high bit is NCCL's).
    pub profiler_tag: u64,
}

impl Default for CollConfig {
    fn default() -> CollConfig {
        CollConfig {
            min_ctas: None,
            max_ctas: None,
            nvls_ctas: None,
            cga_cluster_size: None,
            algorithms: None,
            force_algorithms: true,
            cta_policy: None,
            profiler_tag: 0,
        }
    }
}

impl CollConfig {
    /// The configuration with an algorithm selection (refused later if it holds a NUL).
    pub fn algorithms(mut self, selection: &str) -> CollConfig {
        self.algorithms = Some(text_str(selection));
        self
    }

    /// Checks what NCCL would refuse or misread: every number an `int` (CTA counts at least
    /// 1, the minimum at most the maximum), a selection without NUL bytes that fit its text,
    /// a tag with the high bit clear.
    pub fn check(&self) -> Result<()> {
        let fields = [
            ("min_ctas", self.min_ctas, 1),
            ("max_ctas", self.max_ctas, 1),
            ("nvls_ctas", self.nvls_ctas, 1),
            ("cga_cluster_size", self.cga_cluster_size, 1),
            ("cta_policy", self.cta_policy, 0),
        ];
        for (arg, v, least) in fields {
            if let Some(v) = v.filter(|v| *v < least || i32::try_from(*v).is_err()) {
                return Err(Error::invalid(
                    arg,
                    format_args!("{least}..={}, got {v}", i32::MAX),
                ));
            }
        }
        if let (Some(lo), Some(hi)) = (self.min_ctas, self.max_ctas) {
            if lo > hi {
                return Err(Error::invalid(
                    "min_ctas",
                    format_args!("at most max_ctas ({hi}), got {lo}"),
                ));
            }
        }
        if let Some(a) = &self.algorithms {
            if a.contains('\0') {
                return Err(Error::invalid(
                    "algorithms",
                    format_args!("a selection without NUL bytes"),
                ));
            }
        }
        if self.profiler_tag >> 63 != 0 {
            return Err(Error::invalid(
                "profiler_tag",
                format_args!(
                    "a tag with the high bit clear (NCCL keeps those), got {:#x}",
                    self.profiler_tag
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_nccl_would_refuse_is_refused_first() {
        assert!(CollConfig::default().check().is_ok());
        let good = CollConfig {
            min_ctas: Some(2),
            max_ctas: Some(8),
            profiler_tag: 7,
            ..CollConfig::default()
        }
        .algorithms("ring");
        assert!(good.check().is_ok());
        let bad = |c: CollConfig, arg: &str| match c.check() {
            Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
            other => panic!("{arg}: {other:?}"),
        };
        bad(
            CollConfig {
                min_ctas: Some(9),
                max_ctas: Some(8),
                ..CollConfig::default()
            },
            "min_ctas",
        );
        bad(
            CollConfig {
                max_ctas: Some(0),
                ..CollConfig::default()
            },
            "max_ctas",
        );
        bad(
            CollConfig {
                nvls_ctas: Some(u32::MAX),
                ..CollConfig::default()
            },
            "nvls_ctas",
        );
        bad(CollConfig::default().algorithms("ri\0ng"), "algorithms");
        bad(
            CollConfig {
                profiler_tag: 1 << 63,
                ..CollConfig::default()
            },
            "profiler_tag",
        );
    }
}
