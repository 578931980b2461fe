//! How `weft run`, `weft attach` and `weft chat` show a run. Standard output gets the agent's
//! text and nothing else (so `weft run a "…" > answer.txt` keeps just the answer); everything
//! around it goes to standard error, one line each: tool calls folded as `⏺ Name(args)` with
//! their result as `  ⎿  summary`, sub-runs, errors, the user's replayed input (attach), prompts
//! and weft's own notes.
//!
//! Live text (`text_delta`) is printed as it comes; a turn's `assistant_message` then adds only
//! what the deltas did not show, so a replay (which has no deltas) prints each turn whole and a
//! live stream prints it once. Text from the model or a tool never reaches a terminal with its
//! control characters (an escape sequence in a reply cannot drive the user's terminal); dim and
//! red styling is used only on a terminal, and never with `NO_COLOR` or `TERM=dumb`.

use std::io::Write;

use serde_json::Value;
use weft_core::run::RunEvent;

/// At most this many characters of a tool call's arguments or result are shown.
const FOLD: usize = 100;

/// What is shown of the user's input events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inputs {
    /// Nothing: the user typed it, or gave it on the command line.
    Hide,
    /// `> text` on standard error (a replay).
    Show,
}

/// The renderer: two sinks and what it has printed so far.
pub struct Render<O: Write, E: Write> {
    out: O,
    err: E,
    /// Standard output is a terminal: control characters of model text are dropped.
    out_tty: bool,
    /// Standard error gets ANSI styling.
    color: bool,
    inputs: Inputs,
    /// The last character written to standard output was not a newline.
    out_open: bool,
    /// A prompt without a newline ends standard error.
    err_open: bool,
    /// This turn's live text so far.
    turn_text: String,
    /// The stream was re-attached during this turn, so live text may have a gap.
    turn_gap: bool,
}

impl Render<std::io::Stdout, std::io::Stderr> {
    /// The renderer of this process's standard output and error.
    pub fn terminal(inputs: Inputs) -> Self {
        use std::io::IsTerminal as _;
        let plain = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
            || std::env::var("TERM").is_ok_and(|t| t == "dumb");
        Self::new(
            std::io::stdout(),
            std::io::stderr(),
            std::io::stdout().is_terminal(),
            std::io::stderr().is_terminal() && !plain,
            inputs,
        )
    }
}

impl<O: Write, E: Write> Render<O, E> {
    pub fn new(out: O, err: E, out_tty: bool, color: bool, inputs: Inputs) -> Self {
        Self {
            out,
            err,
            out_tty,
            color,
            inputs,
            out_open: false,
            err_open: false,
            turn_text: String::new(),
            turn_gap: false,
        }
    }

    /// Shows one event of the stream (`kind` and its `data`). Kinds this renderer does not
    /// know, and the bookkeeping ones (`usage`, `provider_chosen`, …), show nothing.
    pub fn event(&mut self, kind: &str, data: &Value) {
        let Some(ev) = RunEvent::parse(kind, data) else {
            return;
        };
        match ev {
            RunEvent::TextDelta(d) => {
                self.turn_text.push_str(&d.text);
                self.text(&d.text);
            }
            RunEvent::AssistantMessage(m) => {
                let full = m.message.text();
                let shown = std::mem::take(&mut self.turn_text);
                let gap = std::mem::replace(&mut self.turn_gap, false);
                if let Some(rest) = full.strip_prefix(shown.as_str()) {
                    self.text(rest);
                } else if gap {
                    // Live text was lost while re-attaching: show the turn whole rather than
                    // leave a hole in it.
                    self.end_out_line();
                    self.text(&full);
                }
                // Otherwise the live text was of an attempt the provider broke off and the
                // retried turn's text followed it: it has all been shown.
                self.end_out_line();
            }
            RunEvent::ToolCall(c) => {
                let args = match &c.input {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                let line = format!("⏺ {}({})", fold(&c.name, FOLD), fold(&args, FOLD));
                self.line(&line, Style::Dim);
            }
            RunEvent::ToolResult(r) => {
                // `reused` is not shown: an answered `Interruption.ask` is always a result
                // recorded (by the gateway) and reused, which says nothing to the reader.
                let line = if r.is_error {
                    format!("  ⎿  error: {}", fold(&r.content, FOLD))
                } else if r.content.trim().is_empty() {
                    "  ⎿  (no output)".to_owned()
                } else {
                    format!("  ⎿  {}", fold(&r.content, FOLD))
                };
                self.line(&line, Style::Dim);
            }
            RunEvent::UserInput(u) if self.inputs == Inputs::Show => {
                let text = match (u.text, u.messages) {
                    (Some(t), _) => t,
                    (None, Some(ms)) => ms.last().map(|m| m.text()).unwrap_or_default(),
                    (None, None) => String::new(),
                };
                self.line(&format!("> {}", fold(&text, 2 * FOLD)), Style::Plain);
            }
            RunEvent::Interruption(i) => {
                self.line(&format!("? {}", fold(&i.question, 4 * FOLD)), Style::Plain);
            }
            RunEvent::RunPaused(p) => {
                self.line(
                    &format!(
                        "⏸ run paused (by its {}); `weft resume --run` goes on",
                        if p.by == "run" {
                            "own pause"
                        } else {
                            p.by.as_str()
                        }
                    ),
                    Style::Dim,
                );
            }
            RunEvent::RunResumed(_) => {
                self.line("▶ run resumed", Style::Dim);
            }
            RunEvent::SubRunStarted(s) => {
                self.line(
                    &format!(
                        "  ↳ sub-run {} of {} started",
                        s.run_id,
                        fold(&s.agent, FOLD)
                    ),
                    Style::Dim,
                );
            }
            RunEvent::SubRunFinished(s) => {
                self.line(
                    &format!("  ↳ sub-run {} {}", s.run_id, s.status.as_str()),
                    Style::Dim,
                );
            }
            RunEvent::ProviderFallback(p) => {
                self.line(
                    &format!(
                        "  provider {} failed ({}: {}); the next one is tried",
                        fold(&p.provider, FOLD),
                        p.code,
                        fold(&p.message, FOLD)
                    ),
                    Style::Dim,
                );
            }
            RunEvent::FileChanged(f) => {
                let paths: Vec<&str> = f.files.iter().map(|x| x.path.as_str()).collect();
                self.line(
                    &format!("  ✎ {}", fold(&paths.join(", "), FOLD)),
                    Style::Dim,
                );
            }
            RunEvent::PeerUpdate(u) => {
                let state = u.state.strip_prefix("TASK_STATE_").unwrap_or(&u.state);
                self.line(
                    &format!(
                        "  ⇄ {} {}: {}",
                        fold(&u.peer, FOLD),
                        state.to_ascii_lowercase(),
                        fold(&u.text, FOLD)
                    ),
                    Style::Dim,
                );
            }
            RunEvent::Notice(n) => {
                self.line(&format!("  ℹ {}", fold(&n.message, FOLD)), Style::Dim);
            }
            RunEvent::ContextCompacted(c) => {
                self.line(
                    &format!(
                        "  ⇣ context compacted ({}): ~{} → ~{} tokens, {} turns summarized",
                        c.trigger, c.before_tokens, c.after_tokens, c.folded_turns
                    ),
                    Style::Dim,
                );
            }
            RunEvent::Error(e) => {
                self.line(
                    &format!(
                        "weft: the run failed: {}: {}",
                        e.code,
                        fold(&e.message, 4 * FOLD)
                    ),
                    Style::Error,
                );
            }
            _ => {}
        }
    }

    /// The stream was re-attached: live text of the current turn may have a gap.
    pub fn reattached(&mut self) {
        if !self.turn_text.is_empty() {
            self.turn_gap = true;
        }
    }

    /// A note of weft's own on standard error (`weft: …`).
    pub fn note(&mut self, msg: &str) {
        self.line(&format!("weft: {msg}"), Style::Dim);
    }

    /// An error of weft's own on standard error (`weft: …`).
    pub fn error(&mut self, msg: &str) {
        self.line(&format!("weft: {msg}"), Style::Error);
    }

    /// A prompt on standard error, the cursor left after it.
    pub fn prompt(&mut self, p: &str) {
        self.end_out_line();
        self.end_err_line();
        let _ = write!(self.err, "{p}");
        let _ = self.err.flush();
        self.err_open = true;
    }

    /// The user answered the prompt: their line (echoed by the terminal) ended it.
    pub fn prompt_answered(&mut self) {
        self.err_open = false;
    }

    /// The prompt was answered with a line typed before it appeared: the line, after it.
    pub fn prompt_echo(&mut self, line: &str) {
        let _ = writeln!(self.err, "{}", fold(line, 4 * FOLD));
        let _ = self.err.flush();
        self.err_open = false;
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.end_err_line();
        let text = if self.out_tty {
            printable(text)
        } else {
            text.to_owned()
        };
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
        if let Some(c) = text.chars().last() {
            self.out_open = c != '\n';
        }
    }

    fn end_out_line(&mut self) {
        if self.out_open {
            let _ = self.out.write_all(b"\n");
            let _ = self.out.flush();
            self.out_open = false;
        }
    }

    fn end_err_line(&mut self) {
        if self.err_open {
            let _ = self.err.write_all(b"\n");
            self.err_open = false;
        }
    }

    fn line(&mut self, line: &str, style: Style) {
        self.end_out_line();
        self.end_err_line();
        let (on, off) = match (self.color, style) {
            (true, Style::Dim) => ("\x1b[2m", "\x1b[0m"),
            (true, Style::Error) => ("\x1b[31m", "\x1b[0m"),
            _ => ("", ""),
        };
        let _ = writeln!(self.err, "{on}{line}{off}");
        let _ = self.err.flush();
    }
}

#[derive(Clone, Copy)]
enum Style {
    Plain,
    Dim,
    Error,
}

/// `s` on one line: control characters dropped, whitespace runs made one space, cut at `max`
/// characters with `…`.
pub fn fold(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut n = 0;
    for word in s.split_whitespace() {
        let word: String = word.chars().filter(|c| !c.is_control()).collect();
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
            n += 1;
        }
        for c in word.chars() {
            if n >= max {
                out.push('…');
                return out;
            }
            out.push(c);
            n += 1;
        }
    }
    out
}

/// `s` without the control characters a terminal would act on (newlines and tabs kept).
fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(inputs: Inputs, events: &[(&str, Value)]) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        {
            let mut r = Render::new(&mut out, &mut err, true, false, inputs);
            for (k, d) in events {
                r.event(k, d);
            }
        }
        (
            String::from_utf8(out).unwrap_or_default(),
            String::from_utf8(err).unwrap_or_default(),
        )
    }

    fn message(text: &str) -> Value {
        json!({"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
    }

    #[test]
    fn live_text_is_printed_once_and_a_replayed_turn_whole() {
        let live = [
            ("text_delta", json!({"text": "echo: "})),
            ("text_delta", json!({"text": "hi"})),
            ("assistant_message", message("echo: hi")),
        ];
        assert_eq!(render(Inputs::Hide, &live).0, "echo: hi\n");
        let replay = [("assistant_message", message("echo: hi"))];
        assert_eq!(render(Inputs::Hide, &replay).0, "echo: hi\n");
        // Deltas cut short (the connection dropped mid-turn, re-attached after): the rest.
        let cut = [
            ("text_delta", json!({"text": "echo: "})),
            ("assistant_message", message("echo: hi")),
        ];
        assert_eq!(render(Inputs::Hide, &cut).0, "echo: hi\n");
    }

    #[test]
    fn notices_and_compactions_are_dim_lines() {
        let (out, err) = render(
            Inputs::Hide,
            &[
                (
                    "notice",
                    json!({"tool_use_id": "c1", "message": "halfway\nthere"}),
                ),
                (
                    "context_compacted",
                    json!({"summary": "s", "before_tokens": 900, "after_tokens": 300,
                           "first_kept_seq": 7, "trigger": "auto", "folded_turns": 3}),
                ),
            ],
        );
        assert_eq!(out, "");
        assert!(err.contains("ℹ halfway"), "{err:?}");
        assert!(
            err.contains("context compacted (auto): ~900 → ~300 tokens, 3 turns"),
            "{err:?}"
        );
    }

    #[test]
    fn a_peers_progress_is_one_dim_line() {
        let (out, err) = render(
            Inputs::Hide,
            &[(
                "peer_update",
                json!({"tool_use_id": "c1", "peer": "echo", "task_id": "t",
                       "state": "TASK_STATE_WORKING", "text": "working on\necho"}),
            )],
        );
        assert_eq!(out, "");
        assert!(err.contains("⇄ echo working: working on"), "{err:?}");
    }

    #[test]
    fn tool_calls_and_results_are_folded_onto_one_line_each_on_stderr() {
        let long = "x".repeat(300);
        let (out, err) = render(
            Inputs::Hide,
            &[
                (
                    "tool_call",
                    json!({"id": "c1", "name": "Context", "input": {"op": "time"}}),
                ),
                (
                    "tool_result",
                    json!({"tool_use_id": "c1", "name": "Context", "content": format!("line one\nline\x1b[31m two {long}")}),
                ),
                (
                    "tool_result",
                    json!({"tool_use_id": "c2", "name": "HTTP", "content": "refused", "is_error": true}),
                ),
            ],
        );
        assert_eq!(out, "");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines[0], "⏺ Context({\"op\":\"time\"})");
        assert!(
            lines[1].starts_with("  ⎿  line one line[31m two xxx"),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with('…'));
        assert_eq!(lines[1].chars().count(), "  ⎿  ".chars().count() + FOLD + 1);
        assert_eq!(lines[2], "  ⎿  error: refused");
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn a_replay_shows_the_users_input_and_control_characters_never_reach_a_terminal() {
        let (out, err) = render(
            Inputs::Show,
            &[
                ("user_input", json!({"text": "hello"})),
                ("assistant_message", message("a\x1b]0;pwned\x07b\nc")),
            ],
        );
        assert_eq!(err, "> hello\n");
        assert_eq!(out, "a]0;pwnedb\nc\n");
    }
}
