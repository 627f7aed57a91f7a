//! What a client process tells the bench, one line each on its stdout: when all its ranks
//! joined, when they all finished each round and the ADD replies they saw, when they all
//! left; or why it stopped. Times are [`super::proc_stat::mono_ns`] readings.

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
    /// The process stops: why.
    Error(String),
}

/// The line that tells the client processes to start the rounds.
pub const GO: &str = "go";

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
            // One line: a message's own newlines would split it.
            Msg::Error(m) => format!("error {}", m.replace('\n', " ")),
        }
    }

    /// The message of a line, or `None` for a line no client process writes.
    pub fn parse(line: &str) -> Option<Msg> {
        let (word, rest) = line.trim_end().split_once(' ')?;
        match word {
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
    use super::Msg;

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
        ];
        for m in all {
            assert_eq!(Msg::parse(&m.to_line()), Some(m.clone()), "{m:?}");
        }
        assert_eq!(Msg::parse("round 1 2 x"), None);
        assert_eq!(Msg::parse("hello"), None);
    }
}
