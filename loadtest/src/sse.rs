//! A small incremental parser of `text/event-stream` bodies, for the run stream
//! (`GET /v1/runs/{id}/stream`): frames of `event:`, `id:` and `data:` lines ended by a blank
//! line, split across body chunks anywhere. Comments (`:keepalive`) and unknown fields are
//! skipped, as the SSE specification says.

use std::collections::VecDeque;

use crate::report::ErrorKind;

/// A line longer than this is not a run event; the stream counts as `invalid` rather than
/// making the generator buffer without bound.
const MAX_LINE: usize = 1 << 20;

/// One dispatched SSE event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The `event:` field; `message` when the frame had none.
    pub event: String,
    /// The `id:` field. weft's run events always carry their seq here; the gateway's own
    /// stream-level `error` event has none.
    pub id: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Feeds body chunks in, takes complete frames out.
#[derive(Default)]
pub struct SseParser {
    /// The current, unfinished line.
    line: Vec<u8>,
    event: String,
    id: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Parses `chunk`, appending every frame it completes to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut VecDeque<Frame>) -> Result<(), ErrorKind> {
        while let Some(nl) = chunk.iter().position(|&b| b == b'\n') {
            let (head, rest) = chunk.split_at(nl);
            if self.line.is_empty() {
                self.line_done(head, out)?;
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.line_done(&line, out)?;
                line.clear();
                self.line = line;
            }
            chunk = &rest[1..];
        }
        if self.line.len() + chunk.len() > MAX_LINE {
            return Err(ErrorKind::Invalid);
        }
        self.line.extend_from_slice(chunk);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut VecDeque<Frame>) -> Result<(), ErrorKind> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data {
                out.push_back(Frame {
                    event: if self.event.is_empty() {
                        "message".to_owned()
                    } else {
                        std::mem::take(&mut self.event)
                    },
                    id: self.id.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            self.id = None;
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line.starts_with(b":") {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = std::str::from_utf8(value).map_err(|_| ErrorKind::Invalid)?;
        match name {
            b"event" => value.clone_into(&mut self.event),
            b"id" => self.id = Some(value.to_owned()),
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether a frame or a line was cut off (the body ended in the middle of it).
    pub fn is_mid_frame(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(parts: &[&str]) -> Vec<Frame> {
        let mut p = SseParser::default();
        let mut out = VecDeque::new();
        for part in parts {
            p.feed(part.as_bytes(), &mut out).unwrap();
        }
        out.into()
    }

    const STREAM: &str = concat!(
        "event: run_started\nid: 1\ndata: {\"seq\":1,\"kind\":\"run_started\",\"data\":{}}\n\n",
        ":keepalive\n\n",
        "event: run_finished\r\nid: 2\r\ndata: {\"seq\":2,\r\ndata: \"kind\":\"run_finished\"}\r\n\r\n",
    );

    #[test]
    fn frames_come_out_whole_however_the_body_is_split() {
        let whole = parse(&[STREAM]);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].event, "run_started");
        assert_eq!(whole[0].id.as_deref(), Some("1"));
        assert_eq!(whole[1].event, "run_finished");
        assert_eq!(whole[1].data, "{\"seq\":2,\n\"kind\":\"run_finished\"}");
        for cut in 1..STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(parse(&[a, b]), whole, "split at {cut}");
        }
    }

    #[test]
    fn frames_without_data_or_event_names() {
        let frames = parse(&["event: nothing\n\ndata:x\n\nid\ndata\n\n"]);
        assert_eq!(frames.len(), 2, "an event with no data is not dispatched");
        assert_eq!(frames[0].event, "message");
        assert_eq!(frames[0].data, "x");
        assert_eq!(frames[1].id.as_deref(), Some(""));
        assert_eq!(frames[1].data, "");
    }

    #[test]
    fn an_unfinished_frame_is_noticed() {
        let mut p = SseParser::default();
        let mut out = VecDeque::new();
        p.feed(b"event: a\ndata: 1\n", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(p.is_mid_frame());
        p.feed(b"\n", &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert!(!p.is_mid_frame());
    }

    #[test]
    fn an_endless_line_is_invalid() {
        let mut p = SseParser::default();
        let mut out = VecDeque::new();
        let chunk = vec![b'x'; MAX_LINE / 2 + 1];
        p.feed(&chunk, &mut out).unwrap();
        assert_eq!(p.feed(&chunk, &mut out), Err(ErrorKind::Invalid));
    }
}
