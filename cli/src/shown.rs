//! What the tool writes to a terminal, made safe: JSON reports with every control and bidi
//! character escaped (the value unchanged), and clap's usage errors, which quote the
//! arguments given, escaped the same way. The rule and the escapes are `oxccl::core::text`'s.

use oxccl::core::text::{Escaped, JsonSafe};
use serde_json::Value;

/// `v` as pretty JSON that writes no control or bidi character raw (see
/// [`JsonSafe`]): it parses back to `v`.
pub fn json(v: &Value) -> String {
    let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
    JsonSafe(&pretty).to_string()
}

/// Parses the command line as `clap` does, except that a usage error is printed with the
/// arguments it quotes escaped (and without colour). Help and version requests print as clap
/// prints them: their text is the tool's own.
pub fn parse_cli<P: clap::Parser>() -> P {
    use clap::builder::styling::Styles;
    use clap::error::ErrorKind;
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
                Err(again) => again.render().ansi().to_string(),
                Ok(_) => e.render().to_string(),
            };
            let lines: Vec<String> = plain.split('\n').map(|l| Escaped(l).to_string()).collect();
            eprint!("{}", lines.join("\n"));
            std::process::exit(e.exit_code())
        }
    }
}
