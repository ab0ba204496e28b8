//! The console at a person's terminal: a line editor (rustyline) on a thread of its own, since
//! reading blocks; a prompt that says what the console waits for; Tab completion of commands,
//! actor ids and a question's choices; and a history kept in the world like a shell's.
//! Invariant: the editor reads only when the console asks for a line, so the terminal is in raw
//! mode only while the console waits for one, and nothing else reads stdin.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::MemHistory;
use rustyline::validate::Validator;
use rustyline::{CompletionType, Config, Editor, ExternalPrinter};
use tokio::sync::mpsc;

use super::COMMANDS;

/// The most lines the history keeps, in memory and in the world; past it the oldest go first.
/// It bounds the file (about 100 KB) and the time to rewrite it after each line.
pub const HISTORY_LIMIT: usize = 1_000;

/// What the person gave the console.
#[derive(Debug, PartialEq)]
pub enum Input {
    Line(String),
    /// Ctrl-C on a half-typed line: the line is dropped, as in a shell, and nothing else
    /// happens.
    Cleared,
    /// Ctrl-C on an empty line (or while the editor was not reading).
    Interrupted,
    /// Ctrl-D on an empty line, or the terminal went away.
    End,
}

/// What the console waits for, as the prompt shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptState {
    /// Nothing runs: a line starts something.
    Idle = 0,
    /// A turn of the agent runs: a line still goes where it says, and Ctrl-C stops the turn.
    Working = 1,
    /// The agent asked a question: the next plain line is the answer.
    Answer = 2,
}

impl PromptState {
    /// The prompts. They all have the same width: the editor measures its prompt once per
    /// line, and [`LivePrompt`] may change while a line is typed.
    pub fn text(self) -> &'static str {
        match self {
            PromptState::Idle => "sausage> ",
            PromptState::Working => "working> ",
            PromptState::Answer => " answer> ",
        }
    }
}

/// The prompt the editor shows. The editor reads it again whenever it redraws the line (after
/// each message printed above it), so it follows the console's state while a line is typed.
#[derive(Clone)]
pub struct LivePrompt(Arc<AtomicU8>);

impl LivePrompt {
    pub fn new() -> LivePrompt {
        LivePrompt(Arc::new(AtomicU8::new(PromptState::Idle as u8)))
    }

    pub fn set(&self, state: PromptState) {
        self.0.store(state as u8, Ordering::Relaxed);
    }

    fn state(&self) -> PromptState {
        match self.0.load(Ordering::Relaxed) {
            1 => PromptState::Working,
            2 => PromptState::Answer,
            _ => PromptState::Idle,
        }
    }
}

impl rustyline::Prompt for LivePrompt {
    fn raw(&self) -> &str {
        self.state().text()
    }
}

/// What completion offers besides the commands; the console keeps it current.
#[derive(Debug, Default)]
pub struct Known {
    /// Actor ids, from the broker's latest `list`.
    pub ids: Vec<String>,
    /// The open question's choices.
    pub choices: Vec<String>,
}

/// What Tab completes in the text before the cursor.
#[derive(Debug, PartialEq)]
pub enum Completion {
    /// Replace from byte `start` to the cursor with one of `words`.
    Words { start: usize, words: Vec<String> },
    /// A path: the folder of `/deploy`.
    Path,
}

/// Completion candidates: `/`commands; ids after `@`, `/deploy ` and `/await `; a path after
/// `/deploy <actor> `; and, on a plain line, the open question's choices.
pub fn complete(before_cursor: &str, known: &Known) -> Completion {
    let line = before_cursor;
    let starting = |start: usize, candidates: &mut dyn Iterator<Item = String>| {
        let typed = &line[start..];
        Completion::Words {
            start,
            words: candidates.filter(|c| c.starts_with(typed)).collect(),
        }
    };
    if let Some(rest) = line.strip_prefix('@')
        && !rest.contains(char::is_whitespace)
    {
        return starting(0, &mut known.ids.iter().map(|id| format!("@{id} ")));
    }
    if line.starts_with('/') {
        let Some((command, _)) = line.split_once(char::is_whitespace) else {
            return starting(0, &mut COMMANDS.iter().map(|c| format!("/{} ", c.name)));
        };
        // The argument being typed: its index, and where it starts.
        let args: Vec<&str> = line[command.len()..].split_whitespace().collect();
        let (index, start) = if line.ends_with(char::is_whitespace) {
            (args.len(), line.len())
        } else {
            (
                args.len() - 1,
                line.len() - args.last().map_or(0, |a| a.len()),
            )
        };
        return match (command, index) {
            ("/deploy" | "/await", 0) => {
                starting(start, &mut known.ids.iter().map(|id| format!("{id} ")))
            }
            ("/deploy", 1) => Completion::Path,
            _ => Completion::Words {
                start,
                words: Vec::new(),
            },
        };
    }
    starting(0, &mut known.choices.iter().cloned())
}

/// The editor's helper: completion, and whether a line is half typed.
struct Helper {
    known: Arc<Mutex<Known>>,
    files: FilenameCompleter,
    /// Whether the line being edited holds more than blanks: kept by the hinter, which the
    /// editor asks after every change of the line, and read by [`read_lines`] when a Ctrl-C
    /// ends the read, since rustyline's `Interrupted` does not say (its key bindings that see
    /// the line need a feature this build leaves out).
    half_line: Arc<AtomicBool>,
    /// See [`Printer::moved`]: a Tab may list completions below the line.
    moved: Arc<AtomicBool>,
    /// A hidden read is under way: the line is drawn as `*`.
    masking: bool,
}

impl Completer for Helper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        self.moved.store(true, Ordering::Relaxed);
        let known = self.known.lock().expect("known lock");
        match complete(&line[..pos], &known) {
            Completion::Words { start, words } => Ok((
                start,
                words
                    .into_iter()
                    .map(|word| Pair {
                        display: word.trim_end().to_string(),
                        replacement: word,
                    })
                    .collect(),
            )),
            Completion::Path => self.files.complete_path(line, pos),
        }
    }
}

impl Hinter for Helper {
    type Hint = String;

    /// Offers no hint; notes whether the line is half typed.
    fn hint(&self, line: &str, _: usize, _: &rustyline::Context<'_>) -> Option<String> {
        self.half_line
            .store(!line.trim().is_empty(), Ordering::Relaxed);
        None
    }
}
impl Highlighter for Helper {
    fn highlight<'l>(&self, line: &'l str, _: usize) -> std::borrow::Cow<'l, str> {
        match self.masking {
            true => std::borrow::Cow::Owned("*".repeat(line.chars().count())),
            false => std::borrow::Cow::Borrowed(line),
        }
    }

    fn highlight_char(&self, _: &str, _: usize, kind: rustyline::highlight::CmdKind) -> bool {
        self.masking && kind != rustyline::highlight::CmdKind::MoveCursor
    }
}
impl Validator for Helper {}
impl rustyline::Helper for Helper {}

/// The lines typed at the console, like a shell's history: loaded at start, at most
/// [`HISTORY_LIMIT`], a line repeated right after itself kept once, and the file rewritten
/// whole (by rename) after each line, so it is never half-written.
#[derive(Debug)]
pub struct History {
    path: PathBuf,
    lines: VecDeque<String>,
}

impl History {
    /// The history in `path`; a missing file is an empty history.
    pub fn load(path: &Path) -> io::Result<History> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let mut history = History {
            path: path.to_path_buf(),
            lines: VecDeque::new(),
        };
        for line in text.lines() {
            history.add(line);
        }
        Ok(history)
    }

    /// Adds a line; returns whether it was added (blank lines and repeats are not).
    pub fn add(&mut self, line: &str) -> bool {
        if line.trim().is_empty() || self.lines.back().is_some_and(|last| last == line) {
            return false;
        }
        if self.lines.len() == HISTORY_LIMIT {
            self.lines.pop_front();
        }
        self.lines.push_back(line.to_string());
        true
    }

    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
    }

    pub fn save(&self) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut text = String::new();
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        // The history is the console's own state, rewritten after every line: a sync each
        // time would cost more than losing the last lines to a power cut.
        crate::fs::write_atomically_unsynced(&self.path, text.as_bytes())
    }
}

/// Prints above the line being typed, redrawing the prompt and the line below, from a thread
/// of its own: the editor's printer may wait until the editor reads again (when a message
/// came just as a line ended), and the world's thread must never wait for a terminal.
/// Text is printed in the order given, except that one printed as a line ends may show up
/// after the next one.
pub struct Printer {
    /// Console → printing thread: text ending in a newline. Dropping it ends the thread.
    texts: std::sync::mpsc::Sender<String>,
    /// Set by the editor thread when something the console did not print went above the
    /// prompt (a line typed or cleared, a list of completions); taken by [`Printer::moved`].
    moved: Arc<AtomicBool>,
}

impl Printer {
    fn start(
        mut printer: Box<dyn ExternalPrinter + Send>,
        moved: Arc<AtomicBool>,
    ) -> Result<Printer> {
        let (texts, to_print) = std::sync::mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("console-printer".into())
            .spawn(move || {
                for text in to_print {
                    // A terminal that went away is noticed by the editor's next read, which
                    // ends the console.
                    let _ = printer.print(text);
                }
            })
            .context("cannot start the console's printing thread")?;
        Ok(Printer { texts, moved })
    }

    /// Whether something the console did not print went above the prompt since the last call:
    /// then the last row the console printed is no longer the one right above the prompt.
    pub fn moved(&self) -> bool {
        self.moved.swap(false, Ordering::Relaxed)
    }

    pub fn print(&self, text: String) {
        // The thread ends only when this sender is dropped, or if printing panicked, when
        // there is nobody left to show anything to.
        let _ = self.texts.send(text);
    }
}

/// What the console asks the editor thread to read.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Read {
    /// A line, shown as typed and kept in the history.
    Line,
    /// A secret's value: each character shown as `*`, kept nowhere.
    Hidden,
}

/// The prompt of a hidden read, as wide as the others.
const HIDDEN_PROMPT: &str = "  value> ";

/// The console's end of the editor thread.
pub struct Terminal {
    /// Console → editor thread: read one line. Dropping it ends the thread after its current
    /// read.
    ask: std::sync::mpsc::Sender<Read>,
    /// Editor thread → console: what each read gave. It holds at most one input, since the
    /// thread reads only when asked; closed when the thread ends.
    inputs: mpsc::UnboundedReceiver<Input>,
    /// Whether a read was asked and its input has not come yet.
    reading: bool,
    /// The terminal's settings at start, put back on drop: an editor stopped in the middle of
    /// a read (SIGTERM) would otherwise leave the terminal in raw mode.
    settings: Option<libc::termios>,
}

impl Terminal {
    /// Starts the editor thread, with the history in `history` and completion from `known`,
    /// and returns the printer that prints above its prompt.
    pub fn start(
        history: &Path,
        prompt: LivePrompt,
        known: Arc<Mutex<Known>>,
    ) -> Result<(Terminal, Printer)> {
        let history = History::load(history)
            .with_context(|| format!("{}: cannot read the history", history.display()))?;
        let settings = terminal_settings();
        let (ask, asked) = std::sync::mpsc::channel::<Read>();
        let (send, inputs) = mpsc::unbounded_channel();
        let (ready, started) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("console-editor".into())
            .spawn(move || {
                let half_line = Arc::new(AtomicBool::new(false));
                let moved = Arc::new(AtomicBool::new(false));
                let mut editor = match editor(&history, known, half_line.clone(), moved.clone()) {
                    Ok(editor) => editor,
                    Err(e) => {
                        // The console waits for this answer; if it is gone, nobody needs it.
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(
                    editor
                        .create_external_printer()
                        .map_err(anyhow::Error::from)
                        .and_then(|p| Printer::start(Box::new(p), moved.clone())),
                );
                read_lines(editor, history, prompt, half_line, moved, asked, send);
            })
            .context("cannot start the console's editor thread")?;
        let printer = started
            .recv()
            .context("the console's editor thread ended at start")?
            .context("cannot set up the terminal for the console")?;
        let terminal = Terminal {
            ask,
            inputs,
            reading: false,
            settings,
        };
        Ok((terminal, printer))
    }

    /// The next input. Cancel-safe: a read asked and not finished is not asked again.
    pub async fn next(&mut self) -> Input {
        self.read(Read::Line).await
    }

    /// The next line, typed hidden (a secret's value): shown as `*`, kept in no history. A
    /// line read already under way is finished first, as typed.
    pub async fn next_hidden(&mut self) -> Input {
        self.read(Read::Hidden).await
    }

    async fn read(&mut self, read: Read) -> Input {
        if !self.reading {
            if self.ask.send(read).is_err() {
                return Input::End;
            }
            self.reading = true;
        }
        let input = self.inputs.recv().await.unwrap_or(Input::End);
        self.reading = false;
        input
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(settings) = &self.settings {
            // SAFETY: fd 0 is the process's stdin, and `settings` came from `tcgetattr` on it.
            // A failure leaves the terminal as it is, which is all that can be done.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, settings) };
        }
    }
}

fn editor(
    history: &History,
    known: Arc<Mutex<Known>>,
    half_line: Arc<AtomicBool>,
    moved: Arc<AtomicBool>,
) -> Result<Editor<Helper, MemHistory>> {
    let config = Config::builder()
        .max_history_size(HISTORY_LIMIT)?
        .history_ignore_dups(true)?
        .completion_type(CompletionType::List)
        .build();
    let mut editor = Editor::with_history(config.clone(), MemHistory::with_config(&config))?;
    editor.set_helper(Some(Helper {
        known,
        files: FilenameCompleter::new(),
        half_line,
        moved,
        masking: false,
    }));
    for line in history.lines() {
        editor.add_history_entry(line)?;
    }
    Ok(editor)
}

/// The editor thread: reads a line each time one is asked, until the console is gone or the
/// input ends.
fn read_lines(
    mut editor: Editor<Helper, MemHistory>,
    mut history: History,
    prompt: LivePrompt,
    half_line: Arc<AtomicBool>,
    moved: Arc<AtomicBool>,
    asked: std::sync::mpsc::Receiver<Read>,
    inputs: mpsc::UnboundedSender<Input>,
) {
    let mut warned = false;
    while let Ok(kind) = asked.recv() {
        // Each read starts with an empty line, which the hinter is not asked about.
        half_line.store(false, Ordering::Relaxed);
        let hidden = kind == Read::Hidden;
        let read = if hidden {
            set_masking(&mut editor, true);
            let read = editor.readline(HIDDEN_PROMPT);
            set_masking(&mut editor, false);
            read
        } else {
            editor.readline(&prompt)
        };
        // The line typed (or cleared) stays on the screen, above the next prompt.
        moved.store(true, Ordering::Relaxed);
        let input = match read {
            Ok(line) if hidden => Input::Line(line),
            Ok(line) => {
                if history.add(&line) {
                    // Only the editor's own history can refuse, and only a line it holds
                    // already: nothing to do.
                    let _ = editor.add_history_entry(line.as_str());
                    if let Err(e) = history.save()
                        && !warned
                    {
                        eprintln!(
                            "console: {}: cannot keep the history ({e}); lines typed now are \
                             not kept",
                            history.path.display()
                        );
                        warned = true;
                    }
                }
                Input::Line(line)
            }
            Err(ReadlineError::Interrupted) if half_line.swap(false, Ordering::Relaxed) => {
                Input::Cleared
            }
            Err(ReadlineError::Interrupted) => Input::Interrupted,
            Err(ReadlineError::Eof) => Input::End,
            Err(e) => {
                eprintln!("console: cannot read the terminal: {e}");
                Input::End
            }
        };
        let end = input == Input::End;
        if inputs.send(input).is_err() || end {
            return;
        }
    }
}

/// Shows each character typed as `*` (`true`), or as typed. Masking needs the highlighter to
/// run even where the terminal's colours are unknown.
fn set_masking(editor: &mut Editor<Helper, MemHistory>, masking: bool) {
    use rustyline::config::Configurer;
    if let Some(helper) = editor.helper_mut() {
        helper.masking = masking;
    }
    editor.set_color_mode(match masking {
        true => rustyline::ColorMode::Forced,
        false => rustyline::ColorMode::Enabled,
    });
}

/// The terminal's settings, to put back at the end; `None` when stdin is not a terminal.
fn terminal_settings() -> Option<libc::termios> {
    // SAFETY: `termios` is plain data, for which all zeroes is a valid value; `tcgetattr`
    // fills it from fd 0, or fails and leaves it unused.
    unsafe {
        let mut settings: libc::termios = std::mem::zeroed();
        (libc::tcgetattr(libc::STDIN_FILENO, &mut settings) == 0).then_some(settings)
    }
}

/// The terminal's width in columns, when stdout is a terminal that says.
pub fn width() -> Option<usize> {
    // SAFETY: `winsize` is plain data, all zeroes valid; TIOCGWINSZ fills it or fails.
    unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        (libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) == 0 && size.ws_col > 0)
            .then_some(usize::from(size.ws_col))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        Known {
            ids: ["agent", "broker", "cargo", "echo"]
                .map(String::from)
                .to_vec(),
            choices: ["red", "rose", "blue"].map(String::from).to_vec(),
        }
    }

    fn words(line: &str) -> (usize, Vec<String>) {
        match complete(line, &known()) {
            Completion::Words { start, words } => (start, words),
            Completion::Path => panic!("{line}: a path"),
        }
    }

    #[test]
    fn tab_completes_commands_ids_paths_and_choices() {
        assert_eq!(words("/dep"), (0, vec!["/deploy ".to_string()]));
        assert_eq!(words("/de").1, ["/deploy ", "/deny "]);
        assert_eq!(words("/").1.len(), COMMANDS.len());
        assert_eq!(words("@e"), (0, vec!["@echo ".to_string()]));
        assert_eq!(words("@").1.len(), 4);
        assert_eq!(words("@echo hel"), (0, vec![]), "text after an id is free");
        assert_eq!(words("/deploy c"), (8, vec!["cargo ".to_string()]));
        assert_eq!(words("/await  ").1.len(), 4);
        assert_eq!(words("/await echo "), (12, vec![]), "then seconds");
        assert_eq!(complete("/deploy echo ", &known()), Completion::Path);
        assert_eq!(complete("/deploy echo ../ac", &known()), Completion::Path);
        assert_eq!(words("/list "), (6, vec![]));
        assert_eq!(words("r"), (0, vec!["red".to_string(), "rose".to_string()]));
        assert_eq!(
            complete("x", &Known::default()),
            Completion::Words {
                start: 0,
                words: vec![]
            }
        );
    }

    #[test]
    fn every_prompt_has_the_same_width() {
        let widths: Vec<usize> = [PromptState::Idle, PromptState::Working, PromptState::Answer]
            .map(|s| s.text().chars().count())
            .to_vec();
        assert!(widths.iter().all(|&w| w == widths[0]), "{widths:?}");
        let prompt = LivePrompt::new();
        assert_eq!(rustyline::Prompt::raw(&prompt), "sausage> ");
        prompt.set(PromptState::Answer);
        assert_eq!(rustyline::Prompt::raw(&prompt), " answer> ");
    }

    #[test]
    fn history_keeps_the_last_lines_once_each_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console/history");
        let mut history = History::load(&path).unwrap();
        assert!(history.add("first"));
        assert!(!history.add("first"), "a repeat right after is kept once");
        assert!(!history.add("   "), "blank lines are not kept");
        for n in 0..HISTORY_LIMIT {
            history.add(&format!("line {n}"));
        }
        assert_eq!(history.lines().count(), HISTORY_LIMIT);
        assert_eq!(
            history.lines().next(),
            Some("line 0"),
            "the oldest went first"
        );
        history.save().unwrap();
        let again = History::load(&path).unwrap();
        assert_eq!(
            again.lines().collect::<Vec<_>>(),
            history.lines().collect::<Vec<_>>()
        );
        std::fs::write(&path, "a\nb\n".repeat(HISTORY_LIMIT)).unwrap();
        let long = History::load(&path).unwrap();
        assert_eq!(long.lines().count(), HISTORY_LIMIT, "a longer file is cut");
        assert_eq!(long.lines().last(), Some("b"));
    }
}
