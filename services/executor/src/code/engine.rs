//! The code agent's interpreter: one execution of an operator's JavaScript from the top, in a
//! fresh QuickJS runtime with nothing of the host but what is bound here — no file system, no
//! network, no timers, no `console` — and a clock and random numbers seeded by the run.
//!
//! Every turn of a code agent's run executes its script again from the start. The calls the
//! transcript recorded are answered from the record, in order; the first call past them stops
//! the script and is this turn's call (the loop runs it, records its result, and asks again).
//! A replayed call whose tool or input differs from the record, or a script that returns before
//! making every recorded call, is a divergence: the script did not do what it did before.
//! No I/O happens here; [`crate::code`] feeds it the transcript and runs what it asks.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rquickjs::{CatchResultExt as _, CaughtError, Context, Ctx, Function, Runtime, Value as Js};
use serde_json::Value;

/// What the interpreter may use of memory (bytes) per execution.
pub const MEMORY_LIMIT: usize = 64 << 20;
/// The interpreter's stack (bytes).
const STACK_LIMIT: usize = 1 << 20;
/// The longest one execution (one turn: the replay and the next call) may run: a script
/// busy for longer holds a thread and a core the executor's other runs need.
pub const TURN_LIMIT: Duration = Duration::from_secs(30);

/// One execution of a script: its source, the run's first message, the tools bound as
/// functions, the run's seeds, and when it must stop.
pub struct Script {
    pub source: String,
    pub input: String,
    /// Bound as `tools.<name>(input)` (names that are JavaScript identifiers); any tool the run
    /// may call is reachable as `call(name, input)`.
    pub tools: Vec<String>,
    /// Seeds `Math.random`.
    pub seed: u64,
    /// What `Date.now()` says before the first call, in ms since the epoch: the clock moves one
    /// millisecond per call made.
    pub clock_ms: i64,
    /// The run's wall clock: the script is stopped at this instant.
    pub deadline: Instant,
    /// The longest this execution may run ([`TURN_LIMIT`] in a run).
    pub turn_limit: Duration,
    /// Set to stop the script at once (the run was cancelled, its lease lost, the process is
    /// stopping).
    pub abandon: Arc<AtomicBool>,
}

/// A call the transcript recorded, and its result.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub name: String,
    pub input: Value,
    /// The result's text.
    pub output: String,
    pub is_error: bool,
}

/// What one execution came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The next call, past the recorded ones.
    Call { name: String, input: Value },
    /// `main` returned (a string as it is, anything else as JSON).
    Return(String),
    /// The script did not repeat what it did before.
    Diverged(String),
    /// It ran past its wall clock.
    TimedOut,
    /// It threw, did not parse, has no `main`, or ran out of memory.
    Failed(String),
    /// [`Script::abandon`] was set.
    Abandoned,
}

/// The host's side of one execution, shared with the bound functions.
#[derive(Default)]
struct Host {
    /// Calls made so far in this execution.
    made: usize,
    /// The call past the record, once made: the script stops at once.
    next: Option<(String, Value)>,
    diverged: Option<String>,
}

impl Script {
    /// Runs the script from the top against `recorded`.
    pub fn run(&self, recorded: &[Recorded]) -> Outcome {
        run(self, recorded)
    }
}

/// Runs `script` from the top against `recorded`.
fn run(script: &Script, recorded: &[Recorded]) -> Outcome {
    let Ok(rt) = Runtime::new() else {
        return Outcome::Failed("the interpreter could not start".into());
    };
    rt.set_memory_limit(MEMORY_LIMIT);
    rt.set_max_stack_size(STACK_LIMIT);
    let host = Rc::new(RefCell::new(Host::default()));
    let timed_out = Rc::new(Cell::new(false));
    let turn_over = Rc::new(Cell::new(false));
    {
        let (host, timed_out, deadline) = (host.clone(), timed_out.clone(), script.deadline);
        let (turn_over, turn_end) = (turn_over.clone(), Instant::now() + script.turn_limit);
        let abandon = script.abandon.clone();
        rt.set_interrupt_handler(Some(Box::new(move || {
            if abandon.load(Ordering::Relaxed) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                timed_out.set(true);
                return true;
            }
            if now >= turn_end {
                turn_over.set(true);
                return true;
            }
            let h = host.borrow();
            h.next.is_some() || h.diverged.is_some()
        })));
    }
    let Ok(ctx) = Context::full(&rt) else {
        return Outcome::Failed("the interpreter could not start".into());
    };
    let ended = ctx.with(|ctx| execute(&ctx, script, recorded, &host));
    // Drain what is left of the job queue (an abandoned `await`), then decide.
    while rt.is_job_pending() {
        if rt.execute_pending_job().is_err() {
            break;
        }
    }
    let host = host.borrow();
    if script.abandon.load(Ordering::Relaxed) {
        return Outcome::Abandoned;
    }
    if let Some(d) = &host.diverged {
        return Outcome::Diverged(d.clone());
    }
    if timed_out.get() {
        return Outcome::TimedOut;
    }
    if turn_over.get() {
        return Outcome::Failed(format!(
            "one turn of the script ran longer than {} s (a turn replays the calls made so far and makes the next one; move long computation into a tool or a sub-run)",
            script.turn_limit.as_secs()
        ));
    }
    if let Some((name, input)) = &host.next {
        return Outcome::Call {
            name: name.clone(),
            input: input.clone(),
        };
    }
    match ended {
        Ok(text) if host.made < recorded.len() => Outcome::Diverged(format!(
            "the script returned after {} of the {} calls it made before; it returned {}",
            host.made,
            recorded.len(),
            preview(&text)
        )),
        Ok(text) => Outcome::Return(text),
        Err(e) => Outcome::Failed(e),
    }
}

/// What the script sees besides its own code, installed before it. `__weft_call` is the host.
const PRELUDE: &str = r"
(() => {
  'use strict';
  const host = globalThis.__weft_call;
  const seed = globalThis.__weft_seed;
  const start = globalThis.__weft_clock;
  delete globalThis.__weft_call;
  delete globalThis.__weft_seed;
  delete globalThis.__weft_clock;
  let made = 0;
  // mulberry32 over the run's seed: the same numbers on every replay.
  let s = seed >>> 0;
  Math.random = function random() {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  // Nothing that reads the host's clock or its garbage collector's timing.
  delete globalThis.performance;
  delete globalThis.WeakRef;
  delete globalThis.FinalizationRegistry;
  const RealDate = Date;
  const now = () => start + made;
  // A date-time without an offset is read as UTC, not in the executor's zone.
  const utc = (s) => (typeof s === 'string' && /^\d{4}-\d{2}-\d{2}T[\d:.]+$/.test(s.trim()) ? s.trim() + 'Z' : s);
  function SeededDate(...args) {
    if (!new.target) return new RealDate(now()).toString();
    if (args.length === 0) return new RealDate(now());
    if (args.length === 1) return new RealDate(utc(args[0]));
    return new RealDate(RealDate.UTC(...args));
  }
  SeededDate.prototype = RealDate.prototype;
  SeededDate.now = now;
  SeededDate.parse = (s) => RealDate.parse(utc(s));
  SeededDate.UTC = RealDate.UTC;
  Object.defineProperty(RealDate.prototype, 'constructor', { value: SeededDate });
  // Local time is UTC whatever the executor's zone, so a replay elsewhere reads the same.
  const proto = RealDate.prototype;
  for (const f of ['FullYear', 'Month', 'Date', 'Day', 'Hours', 'Minutes', 'Seconds', 'Milliseconds']) {
    proto['get' + f] = proto['getUTC' + f];
    if (f !== 'Day') proto['set' + f] = proto['setUTC' + f];
  }
  proto.getTimezoneOffset = function getTimezoneOffset() { return 0; };
  proto.getYear = function getYear() { return this.getUTCFullYear() - 1900; };
  proto.setYear = function setYear(y) { return this.setUTCFullYear(y < 100 && y >= 0 ? 1900 + y : y); };
  proto.toString = function toString() { return this.toUTCString(); };
  proto.toDateString = function toDateString() { return this.toISOString().slice(0, 10); };
  proto.toTimeString = function toTimeString() { return this.toISOString().slice(11, 23) + 'Z'; };
  proto.toLocaleString = proto.toString;
  proto.toLocaleDateString = proto.toDateString;
  proto.toLocaleTimeString = proto.toTimeString;
  globalThis.Date = SeededDate;
  class ToolError extends Error {
    constructor(tool, message) {
      super(message);
      this.name = 'ToolError';
      this.tool = tool;
    }
  }
  globalThis.ToolError = ToolError;
  function call(name, input) {
    if (typeof name !== 'string') throw new TypeError('call(name, input): name must be a string');
    const text = JSON.stringify(input === undefined ? {} : input);
    made += 1;
    const answer = JSON.parse(host(name, text));
    if (answer.error !== undefined) throw new ToolError(name, answer.error);
    try {
      return JSON.parse(answer.ok);
    } catch (_) {
      return answer.ok;
    }
  }
  globalThis.call = call;
  const tools = {};
  for (const name of globalThis.__weft_tools) tools[name] = (input) => call(name, input);
  delete globalThis.__weft_tools;
  globalThis.tools = Object.freeze(tools);
})();
";

/// Evaluates the prelude and the script, calls `main(input)` and runs the job queue until it
/// settles: `main`'s answer as text, or why it failed.
fn execute(
    ctx: &Ctx<'_>,
    script: &Script,
    recorded: &[Recorded],
    host: &Rc<RefCell<Host>>,
) -> Result<String, String> {
    install(ctx, script, recorded, host)
        .map_err(|e| format!("the interpreter could not start: {e}"))?;
    ctx.eval::<(), _>(PRELUDE)
        .catch(ctx)
        .map_err(|e| format!("the interpreter could not start: {e}"))?;
    let mut opts = rquickjs::context::EvalOptions::default();
    opts.global = true;
    opts.strict = false;
    opts.filename = Some("script.js".into());
    ctx.eval_with_options::<(), _>(script.source.as_str(), opts)
        .catch(ctx)
        .map_err(|e| describe(&e))?;
    let main: Js = ctx.globals().get("main").map_err(|e| e.to_string())?;
    let Some(main) = main.as_function() else {
        return Err("the script defines no function `main(input)`".into());
    };
    let answered: Js = main
        .call((script.input.as_str(),))
        .catch(ctx)
        .map_err(|e| describe(&e))?;
    let value = match answered.as_promise() {
        None => answered,
        Some(p) => {
            let p = p.clone();
            while ctx.execute_pending_job() {}
            match p.state() {
                rquickjs::promise::PromiseState::Resolved => p
                    .result::<Js>()
                    .and_then(Result::ok)
                    .unwrap_or_else(|| Js::new_undefined(ctx.clone())),
                rquickjs::promise::PromiseState::Rejected => {
                    let e = p.result::<Js>().map(|r| r.catch(ctx));
                    return Err(match e {
                        Some(Err(e)) => describe(&e),
                        _ => "main's promise was rejected".into(),
                    });
                }
                rquickjs::promise::PromiseState::Pending => {
                    return Err("main's promise never settled (code agents have no timers; await only tool calls)".into());
                }
            }
        }
    };
    if value.is_undefined() {
        return Ok(String::new());
    }
    if let Some(s) = value.as_string() {
        return s.to_string().map_err(|e| e.to_string());
    }
    match ctx.json_stringify(value).catch(ctx) {
        Ok(Some(s)) => s.to_string().map_err(|e| e.to_string()),
        Ok(None) => Ok(String::new()),
        Err(e) => Err(format!("main's answer is not JSON: {}", describe(&e))),
    }
}

/// Binds the host function (`__weft_call(name, input_json)` → `{"ok": text}` or `{"error":
/// text}`), the seeds and the tool names.
fn install<'js>(
    ctx: &Ctx<'js>,
    script: &Script,
    recorded: &[Recorded],
    host: &Rc<RefCell<Host>>,
) -> rquickjs::Result<()> {
    let g = ctx.globals();
    let recorded: Rc<[Recorded]> = recorded.into();
    let host = host.clone();
    let call = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, name: String, input: String| -> rquickjs::Result<String> {
            let input: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
            let mut h = host.borrow_mut();
            if h.next.is_some() || h.diverged.is_some() {
                return Err(ctx.throw(rquickjs::String::from_str(ctx.clone(), "stopped")?.into()));
            }
            let i = h.made;
            h.made += 1;
            let Some(r) = recorded.get(i) else {
                h.next = Some((name, input));
                drop(h);
                return Err(ctx.throw(rquickjs::String::from_str(ctx.clone(), "stopped")?.into()));
            };
            if r.name != name || r.input != input {
                h.diverged = Some(format!(
                    "call {} was {} {} when recorded, and is {} {} now",
                    i + 1,
                    r.name,
                    preview(&r.input.to_string()),
                    name,
                    preview(&input.to_string())
                ));
                drop(h);
                return Err(ctx.throw(rquickjs::String::from_str(ctx.clone(), "stopped")?.into()));
            }
            let key = if r.is_error { "error" } else { "ok" };
            Ok(serde_json::json!({ key: r.output }).to_string())
        },
    )?;
    g.set("__weft_call", call)?;
    g.set("__weft_seed", (script.seed & 0xffff_ffff) as f64)?;
    g.set("__weft_clock", script.clock_ms as f64)?;
    let names: Vec<String> = script
        .tools
        .iter()
        .filter(|n| is_identifier(n))
        .cloned()
        .collect();
    g.set("__weft_tools", names)?;
    Ok(())
}

/// A thrown error as the run's error says it: message and stack.
fn describe(e: &CaughtError<'_>) -> String {
    match e {
        CaughtError::Exception(x) => {
            let msg = x.message().unwrap_or_default();
            match x.stack() {
                Some(stack) if !stack.trim().is_empty() => format!("{msg}\n{}", stack.trim_end()),
                _ => msg,
            }
        }
        CaughtError::Value(v) => format!("the script threw {v:?}"),
        CaughtError::Error(e) => e.to_string(),
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// At most 200 characters of `s`.
fn preview(s: &str) -> String {
    if s.chars().count() <= 200 {
        return s.to_owned();
    }
    let mut p: String = s.chars().take(200).collect();
    p.push('…');
    p
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn script(source: &str) -> Script {
        script_for(source, Duration::from_secs(5))
    }

    fn script_for(source: &str, wall: Duration) -> Script {
        Script {
            source: source.into(),
            input: "hello".into(),
            tools: vec!["Memory".into(), "Agent".into(), "mcp__x__y".into()],
            seed: 42,
            clock_ms: 1_700_000_000_000,
            deadline: Instant::now() + wall,
            turn_limit: TURN_LIMIT,
            abandon: Arc::new(AtomicBool::new(false)),
        }
    }

    fn answer(name: &str, input: Value, output: &str) -> Recorded {
        Recorded {
            name: name.into(),
            input,
            output: output.into(),
            is_error: false,
        }
    }

    const PIPELINE: &str = r#"
      function main(input) {
        const a = tools.Agent({op: "spawn", agent: "writer", input: "draft " + input});
        tools.Memory({op: "set", scope: "run", key: "k", value: a.output});
        return {draft: a.output, r: Math.random(), t: Date.now()};
      }"#;

    #[test]
    fn each_call_is_one_turn_and_the_record_answers_the_calls_before_it() {
        let s = script(PIPELINE);
        let spawn = json!({"op": "spawn", "agent": "writer", "input": "draft hello"});
        assert_eq!(
            s.run(&[]),
            Outcome::Call {
                name: "Agent".into(),
                input: spawn.clone()
            }
        );
        let mut rec = vec![answer("Agent", spawn, r#"{"output": "the draft"}"#)];
        let set = json!({"op": "set", "scope": "run", "key": "k", "value": "the draft"});
        assert_eq!(
            s.run(&rec),
            Outcome::Call {
                name: "Memory".into(),
                input: set.clone()
            }
        );
        rec.push(answer("Memory", set, "ok"));
        let Outcome::Return(text) = s.run(&rec) else {
            panic!("the script returns");
        };
        // The clock moved one millisecond per call; the numbers are the run's, every time.
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["draft"], "the draft");
        assert_eq!(v["t"], 1_700_000_000_002_i64);
        assert_eq!(s.run(&rec), Outcome::Return(text));
    }

    #[test]
    fn a_replay_that_calls_otherwise_or_stops_early_diverges() {
        let spawn = json!({"op": "spawn", "agent": "writer", "input": "draft hello"});
        let rec = vec![answer("Agent", spawn, r#"{"output": "x"}"#)];
        let other =
            script(r#"function main(i) { tools.Agent({op: "spawn", agent: "other", input: i}); }"#);
        let Outcome::Diverged(why) = other.run(&rec) else {
            panic!("another input diverges");
        };
        assert!(why.starts_with("call 1 was Agent"), "{why}");
        assert!(why.contains(r#""agent":"other""#), "{why}");
        let renamed = script(
            r#"function main(i) { call("Memory", {op: "spawn", agent: "writer", input: "draft " + i}); }"#,
        );
        assert!(matches!(renamed.run(&rec), Outcome::Diverged(_)));
        let early = script("function main(i) { return 1; }");
        let Outcome::Diverged(why) = early.run(&rec) else {
            panic!("returning before the recorded calls diverges");
        };
        assert!(why.contains("after 0 of the 1 calls"), "{why}");
        // Catching the divergence does not help.
        let sly =
            script(r#"function main(i) { try { tools.Agent({}); } catch (_) {} return "fine"; }"#);
        assert!(matches!(sly.run(&rec), Outcome::Diverged(_)));
    }

    #[test]
    fn an_endless_loop_stops_at_the_wall_clock() {
        let s = script_for(
            "function main(i) { for (;;) {} }",
            Duration::from_millis(200),
        );
        assert_eq!(s.run(&[]), Outcome::TimedOut);
        let caught = script_for(
            "function main(i) { for (;;) { try { for (;;) {} } catch (_) {} } }",
            Duration::from_millis(200),
        );
        assert_eq!(caught.run(&[]), Outcome::TimedOut);
    }

    #[test]
    fn a_turn_that_runs_too_long_fails_before_the_wall_clock() {
        let mut s = script_for("function main(i) { for (;;) {} }", Duration::from_secs(600));
        s.turn_limit = Duration::from_millis(200);
        let Outcome::Failed(why) = s.run(&[]) else {
            panic!("a turn past its limit fails");
        };
        assert!(
            why.contains("one turn of the script ran longer than"),
            "{why}"
        );
    }

    #[test]
    fn abandoning_stops_a_running_script() {
        let s = script_for("function main(i) { for (;;) {} }", Duration::from_secs(600));
        let flag = s.abandon.clone();
        let t = std::thread::spawn(move || s.run(&[]));
        flag.store(true, Ordering::Relaxed);
        assert_eq!(t.join().unwrap(), Outcome::Abandoned);
    }

    #[test]
    fn tool_errors_throw_tool_errors_and_async_main_works() {
        let rec = vec![Recorded {
            name: "Memory".into(),
            input: json!({"a": 1}),
            output: "boom".into(),
            is_error: true,
        }];
        let s = script(
            "async function main(i) { try { await tools.Memory({a: 1}); } catch (e) { return `${e.name}:${e.tool}:${e.message}`; } }",
        );
        assert_eq!(s.run(&rec), Outcome::Return("ToolError:Memory:boom".into()));
        // A call caught by the script still ends the turn as that call.
        let s = script(
            r#"function main(i) { try { call("mcp__x__y", {}); } catch (e) { return "caught"; } }"#,
        );
        assert_eq!(
            s.run(&[]),
            Outcome::Call {
                name: "mcp__x__y".into(),
                input: json!({})
            }
        );
    }

    #[test]
    fn the_script_has_no_host_and_a_utc_seeded_clock() {
        let s = script(
            "function main(i) { return [typeof console, typeof require, typeof setTimeout, typeof fetch, typeof std, typeof os, typeof performance, typeof WeakRef, typeof tools.mcp__x__y].join(','); }",
        );
        assert_eq!(
            s.run(&[]),
            Outcome::Return(
                "undefined,undefined,undefined,undefined,undefined,undefined,undefined,undefined,function".into()
            )
        );
        // Local forms are UTC whatever the executor's zone.
        let s = script(
            "function main(i) { return [new Date(2024, 0, 1, 10).toISOString(), new Date('2024-01-01T10:00').toISOString(), Date.parse('2024-01-01T10:00'), new Date(0).getYear()].join(' '); }",
        );
        assert_eq!(
            s.run(&[]),
            Outcome::Return(
                "2024-01-01T10:00:00.000Z 2024-01-01T10:00:00.000Z 1704103200000 70".into()
            )
        );
        let s = script(
            "function main(i) { const d = new Date(); return [d.toISOString(), d.getHours(), d.getTimezoneOffset(), new Date(0).getFullYear(), new Date() instanceof Date].join(' '); }",
        );
        assert_eq!(
            s.run(&[]),
            Outcome::Return("2023-11-14T22:13:20.000Z 22 0 1970 true".into())
        );
        let random = script("function main(i) { return [Math.random(), Math.random()]; }");
        assert_eq!(random.run(&[]), random.run(&[]));
    }

    #[test]
    fn failures_say_where() {
        let Outcome::Failed(why) = script("function main(i) { null.x }").run(&[]) else {
            panic!("a throw fails");
        };
        assert!(why.contains("script.js:1"), "{why}");
        let Outcome::Failed(why) = script("function main(i {").run(&[]) else {
            panic!("a syntax error fails");
        };
        assert!(why.contains("script.js:1"), "{why}");
        let Outcome::Failed(why) = script("const x = 1;").run(&[]) else {
            panic!("no main fails");
        };
        assert!(why.contains("no function `main(input)`"), "{why}");
        let Outcome::Failed(why) =
            script(r#"function main(i) { const a = []; for (;;) a.push("x".repeat(1 << 20)); }"#)
                .run(&[])
        else {
            panic!("running out of memory fails");
        };
        assert!(why.contains("out of memory"), "{why}");
    }
}
