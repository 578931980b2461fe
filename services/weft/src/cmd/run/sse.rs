//! A server-sent events reader for `GET /v1/runs/{id}/stream`: bytes in, frames out. Only what
//! the run stream uses is kept (`id`, `event`, `data`; comments such as `: keepalive` are
//! skipped); lines may end in `\n`, `\r\n` or `\r`, and a frame may arrive split across chunks.

/// One SSE frame.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's `id:` read as a number (the run's seq); `None` when absent or not a number.
    pub id: Option<i64>,
    /// The frame's `event:` (the event kind); empty when the frame named none.
    pub event: String,
    /// The frame's `data:` lines, joined with `\n`.
    pub data: String,
}

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of a line not yet ended.
    partial: Vec<u8>,
    /// The last byte seen was a `\r`, so a `\n` right after it ends nothing more.
    after_cr: bool,
    current: Frame,
    has_data: bool,
}

impl Parser {
    /// Feeds `chunk`; answers the frames it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.partial);
                    if let Some(f) = self.line(&String::from_utf8_lossy(&line)) {
                        out.push(f);
                    }
                }
                _ => self.partial.push(b),
            }
        }
        out
    }

    /// Forgets a frame cut off by a dropped connection.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    fn line(&mut self, line: &str) -> Option<Frame> {
        if line.is_empty() {
            let done = std::mem::take(&mut self.current);
            let had = std::mem::replace(&mut self.has_data, false);
            return had.then_some(done);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "id" => self.current.id = value.trim().parse().ok(),
            "event" => value.clone_into(&mut self.current.event),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_chunks_and_line_endings_are_read_whole() {
        let mut p = Parser::default();
        let mut frames = p.push(b": keepalive\n\nid: 3\nevent: text_delta\r\ndata: {\"a\":");
        assert!(frames.is_empty());
        frames.extend(p.push(b"1}\r\n\r\nid: 4\revent: run_finished\rdata: x\rdata: y\r\r"));
        assert_eq!(
            frames,
            [
                Frame {
                    id: Some(3),
                    event: "text_delta".into(),
                    data: "{\"a\":1}".into()
                },
                Frame {
                    id: Some(4),
                    event: "run_finished".into(),
                    data: "x\ny".into()
                },
            ]
        );
    }

    #[test]
    fn a_reset_drops_a_frame_cut_short() {
        let mut p = Parser::default();
        assert!(p.push(b"id: 7\nevent: tool_call\ndata: {").is_empty());
        p.reset();
        let frames = p.push(b"id: 8\nevent: usage\ndata: {}\n\n");
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].id, Some(8));
        assert_eq!(frames[0].data, "{}");
    }
}
