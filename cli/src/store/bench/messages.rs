//! What a client process tells the bench, one line each on its stdout: when all its ranks
//! joined, when they all finished each round and the ADD replies they saw, when they all
//! left; or, when it stopped short, what its ranks had seen ([`Tally`]), or why it could not
//! go on at all. Times are [`super::proc_stat::mono_ns`] readings.

/// One line of a client process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Every rank of the process is connected and validated, at this time; the process then
    /// waits for `go` on its stdin.
    Joined(u64),
    /// Every rank of the process finished `round` by `at`; `values` are the replies its ranks'
    /// ADDs got in that round, one per rank.
    Round {
        /// The round (from 0).
        round: usize,
        /// When its last rank got STOP_WAITING.
        at: u64,
        /// The ADD replies.
        values: Vec<i64>,
    },
    /// Every rank of the process closed its connection, at this time.
    Left(u64),
    /// The process stopped short of the end: what its ranks had seen.
    Stopped(Tally),
    /// The process stops for a reason of its own, not its ranks' (epoll, its pipes).
    Error(String),
}

/// The line that tells the client processes to start the rounds.
pub const GO: &str = "go";
/// The line that tells a client process to report its [`Tally`] and end.
pub const STOP: &str = "stop";

/// Why a client process stopped short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Some of its ranks failed (it waited a moment for the others to settle first).
    Failed,
    /// Its ranks made no progress within the phase's bound.
    Timeout,
    /// The bench told it to ([`STOP`]), another process having failed.
    Told,
}

impl StopReason {
    fn word(self) -> &'static str {
        match self {
            StopReason::Failed => "failed",
            StopReason::Timeout => "timeout",
            StopReason::Told => "told",
        }
    }

    fn from_word(w: &str) -> Option<StopReason> {
        [StopReason::Failed, StopReason::Timeout, StopReason::Told]
            .into_iter()
            .find(|r| r.word() == w)
    }
}

/// What a client process's ranks had done when it stopped short: counts, not guesses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Why it stopped (`None` only in a tally being built).
    pub why: Option<StopReason>,
    /// When its first rank failed, if one did.
    pub first_failure_at: Option<u64>,
    /// The ranks it drives.
    pub ranks: usize,
    /// Those that had joined (validated and pinged back).
    pub joined: usize,
    /// Failed ranks per kind of error (see [`super::rank::RankError::kind`]), in the order
    /// first seen.
    pub failed: Vec<(String, usize)>,
    /// Ranks neither failed nor finished, per the step they waited at ("connecting",
    /// "joining", "joined", "adding", "waiting").
    pub unfinished: Vec<(String, usize)>,
    /// The first failure's message ("" if none failed).
    pub first: String,
}

/// Adds one to `word`'s count in `counts`, keeping the order words are first seen in.
pub fn count(counts: &mut Vec<(String, usize)>, word: &str, n: usize) {
    match counts.iter_mut().find(|(w, _)| w == word) {
        Some((_, c)) => *c += n,
        None => counts.push((word.to_string(), n)),
    }
}

fn counts_to_word(counts: &[(String, usize)]) -> String {
    if counts.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = counts.iter().map(|(w, n)| format!("{w}:{n}")).collect();
    parts.join(",")
}

fn counts_from_word(s: &str) -> Option<Vec<(String, usize)>> {
    if s == "-" {
        return Some(Vec::new());
    }
    s.split(',')
        .map(|p| {
            let (w, n) = p.split_once(':')?;
            Some((w.to_string(), n.parse().ok()?))
        })
        .collect()
}

impl Tally {
    fn to_words(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.why.map_or("-", StopReason::word),
            self.first_failure_at
                .map_or_else(|| "-".to_string(), |t| t.to_string()),
            self.ranks,
            self.joined,
            counts_to_word(&self.failed),
            counts_to_word(&self.unfinished),
            self.first.replace('\n', " "),
        )
    }

    fn from_words(rest: &str) -> Option<Tally> {
        let mut it = rest.splitn(7, ' ');
        let why = it.next()?;
        let why = if why == "-" {
            None
        } else {
            Some(StopReason::from_word(why)?)
        };
        let at = it.next()?;
        let first_failure_at = if at == "-" {
            None
        } else {
            Some(at.parse().ok()?)
        };
        Some(Tally {
            why,
            first_failure_at,
            ranks: it.next()?.parse().ok()?,
            joined: it.next()?.parse().ok()?,
            failed: counts_from_word(it.next()?)?,
            unfinished: counts_from_word(it.next()?)?,
            first: it.next().unwrap_or("").to_string(),
        })
    }
}

impl Msg {
    /// The line, without its newline.
    pub fn to_line(&self) -> String {
        match self {
            Msg::Joined(t) => format!("joined {t}"),
            Msg::Round { round, at, values } => {
                let mut s = format!("round {round} {at}");
                for v in values {
                    s.push(' ');
                    s.push_str(&v.to_string());
                }
                s
            }
            Msg::Left(t) => format!("left {t}"),
            Msg::Stopped(t) => format!("stopped {}", t.to_words()),
            // One line: a message's own newlines would split it.
            Msg::Error(m) => format!("error {}", m.replace('\n', " ")),
        }
    }

    /// The message of a line, or `None` for a line no client process writes.
    pub fn parse(line: &str) -> Option<Msg> {
        let (word, rest) = line.trim_end().split_once(' ')?;
        match word {
            "stopped" => Tally::from_words(rest).map(Msg::Stopped),
            "joined" => rest.parse().ok().map(Msg::Joined),
            "left" => rest.parse().ok().map(Msg::Left),
            "error" => Some(Msg::Error(rest.to_string())),
            "round" => {
                let mut it = rest.split(' ');
                let round = it.next()?.parse().ok()?;
                let at = it.next()?.parse().ok()?;
                let values = it.map(|v| v.parse().ok()).collect::<Option<Vec<i64>>>()?;
                Some(Msg::Round { round, at, values })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Msg, StopReason, Tally};

    #[test]
    fn every_message_reads_back_as_written() {
        let all = [
            Msg::Joined(12),
            Msg::Round {
                round: 3,
                at: 99,
                values: vec![1, 4096, 7],
            },
            Msg::Round {
                round: 0,
                at: 5,
                values: vec![],
            },
            Msg::Left(u64::MAX),
            Msg::Error("the server closed rank 3".into()),
            Msg::Stopped(Tally {
                why: Some(StopReason::Failed),
                first_failure_at: Some(77),
                ranks: 10,
                joined: 4,
                failed: vec![("refused".into(), 5), ("reset".into(), 1)],
                unfinished: vec![("connecting".into(), 0)],
                first: "rank 3: connect: Connection refused (os error 111)".into(),
            }),
            Msg::Stopped(Tally {
                why: Some(StopReason::Told),
                ranks: 2,
                joined: 2,
                unfinished: vec![("joined".into(), 2)],
                ..Tally::default()
            }),
        ];
        for m in all {
            assert_eq!(Msg::parse(&m.to_line()), Some(m.clone()), "{m:?}");
        }
        assert_eq!(Msg::parse("round 1 2 x"), None);
        assert_eq!(Msg::parse("hello"), None);
    }
}
