//! What the tool writes to a terminal, made safe: JSON reports with every control and bidi
//! character escaped (the value unchanged), and clap's usage errors, which quote the
//! arguments given, escaped the same way, under the usage line the command's `--help` shows.
//! The rule and the escapes are `oxccl::core::text`'s.

use oxccl::core::text::{Escaped, JsonSafe};
use serde_json::Value;

/// `v` as pretty JSON that writes no control or bidi character raw (see
/// [`JsonSafe`]): it parses back to `v`.
pub fn json(v: &Value) -> String {
    let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
    JsonSafe(&pretty).to_string()
}

/// Parses the command line as `clap` does, except that a usage error is printed with the
/// arguments it quotes escaped (and without colour), and with the usage line of `--help`.
/// Help and version requests print as clap prints them: their text is the tool's own.
pub fn parse_cli<P: clap::Parser>() -> P {
    use clap::builder::styling::Styles;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match P::try_parse() {
        Ok(p) => p,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            // Rendered again without styles, the message holds clap's words and the arguments
            // as given (its own rendering strips escape sequences, the arguments' too, which
            // would hide them); it is lines of clap's, and what they quote is escaped.
            let plain = match P::command().styles(Styles::plain()).try_get_matches() {
                Err(mut again) => {
                    // clap's usage line after an error lists the options given, and the one it
                    // suggests, as if they were required (`oxccl perf --root <ROOT> ...`): the
                    // usage of the command as its --help shows it reads right instead.
                    if again.get(ContextKind::Usage).is_some() {
                        let usage = help_usage(P::command().styles(Styles::plain()));
                        again.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
                    }
                    again.render().ansi().to_string()
                }
                Ok(_) => e.render().to_string(),
            };
            let lines: Vec<String> = plain.split('\n').map(|l| Escaped(l).to_string()).collect();
            eprint!("{}", lines.join("\n"));
            std::process::exit(e.exit_code())
        }
    }
}

/// The usage line(s) that `--help` shows for the (sub)command this process's arguments name
/// (`oxccl perf ...`: perf's), under the binary's name as clap takes it from `argv[0]`.
fn help_usage(mut root: clap::Command) -> clap::builder::StyledStr {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|f| f.to_str());
    if let Some(name) = name {
        root = root.bin_name(name.to_owned());
    }
    // Built, every subcommand knows its full name (`oxccl store bench`).
    root.build();
    let mut cmd = &root;
    for a in args.iter().skip(1) {
        match a.to_str().and_then(|a| cmd.find_subcommand(a)) {
            Some(sub) => cmd = sub,
            None => break,
        }
    }
    cmd.clone().render_usage()
}
