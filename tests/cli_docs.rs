//! Man pages and shell completions generated from the programs' own clap
//! definitions: `tierd man --out DIR` and `tierctl man --out DIR` write a
//! page per command that `man -l` renders; `completions bash` gives a
//! script bash accepts and that completes subcommands and options when
//! sourced; zsh and fish scripts name the subcommands too.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// The subcommands `PROGRAM --help` lists.
fn subcommands(bin: &Path) -> Vec<String> {
    let help = run_ok(Command::new(bin).arg("--help"));
    let after = help.split("Commands:").nth(1).expect("a Commands: section");
    after
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect()
}

fn check_man(bin: &Path, name: &str) {
    let dir = tempdir();
    let listed = run_ok(Command::new(bin).args(["man", "--out"]).arg(dir.path()));
    let subs = subcommands(bin);
    assert!(subs.len() >= 4, "{subs:?}");
    for page in std::iter::once(name.to_string()).chain(subs.iter().map(|s| format!("{name}-{s}")))
    {
        let path = dir.path().join(format!("{page}.1"));
        assert!(
            listed.contains(&path.display().to_string()),
            "{page} not listed: {listed}"
        );
        let text = String::from_utf8_lossy(&read(&path)).into_owned();
        assert!(
            text.contains(".TH") && text.contains(".SH NAME"),
            "{page}: {text}"
        );
        // man renders it (plain text, no pager).
        let out = run_ok(
            tool("man")
                .arg("-l")
                .arg(&path)
                .env("MANPAGER", "cat")
                .env("MANWIDTH", "100"),
        );
        assert!(
            out.contains("NAME") && out.contains("SYNOPSIS"),
            "{page}: {out}"
        );
    }
    // The top page to stdout lists every subcommand.
    let top = run_ok(Command::new(bin).arg("man"));
    for s in &subs {
        assert!(top.contains(s.as_str()), "{s} missing from {name}(1)");
    }
}

#[test]
fn man_pages_for_every_command_render() {
    check_man(&tierd_bin(), "tierd");
    check_man(&tierctl_bin(), "tierctl");
    // The daemon's page documents the per-key flags.
    let dir = tempdir();
    run_ok(
        Command::new(tierd_bin())
            .args(["man", "--out"])
            .arg(dir.path()),
    );
    // Nested subcommands get pages of their own.
    for sub in ["info", "import", "export", "generate", "replay"] {
        let page = dir.path().join(format!("tierd-trace-{sub}.1"));
        let text = String::from_utf8_lossy(&read(&page)).into_owned();
        assert!(text.contains(".SH SYNOPSIS"), "tierd-trace-{sub}.1: {text}");
    }
    let serve = String::from_utf8_lossy(&read(&dir.path().join("tierd-serve.1"))).into_owned();
    assert!(
        serve.contains("migrate.bandwidth") && serve.contains("export\\-name"),
        "{serve}"
    );
}

#[test]
fn bash_completion_completes_subcommands_and_options() {
    let dir = tempdir();
    let script = dir.path().join("tierctl.bash");
    write(
        &script,
        run_ok(Command::new(tierctl_bin()).args(["completions", "bash"])).as_bytes(),
    );
    run_ok(tool("bash").arg("-n").arg(&script));
    // Source it and ask what `tierctl con<TAB>` and `tierctl config <TAB>`
    // give, calling the function as bash does (command, word, previous word).
    let complete = |words: &str, cword: usize| {
        run_ok(tool("bash").arg("-c").arg(format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; _tierctl \"${{COMP_WORDS[0]}}\" \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        )))
    };
    let got = complete("tierctl con", 1);
    assert_eq!(got.trim(), "config", "{got}");
    let got = complete("tierctl com", 1);
    assert_eq!(got.trim(), "completions", "{got}");
    let got = complete("tierctl config ''", 2);
    for want in ["show", "set", "reset"] {
        assert!(got.lines().any(|l| l == want), "{want}: {got}");
    }
    let got = complete("tierctl status --j", 2);
    assert!(got.lines().any(|l| l == "--json"), "{got}");
    for shell in ["zsh", "fish"] {
        for bin in [tierd_bin(), tierctl_bin()] {
            let s = run_ok(Command::new(&bin).args(["completions", shell]));
            assert!(
                s.contains("completions") && s.len() > 500,
                "{shell} {}: {s}",
                bin.display()
            );
        }
    }
    let s = run_ok(Command::new(tierd_bin()).args(["completions", "bash"]));
    assert!(
        s.contains("--migrate.bandwidth") && s.contains("serve"),
        "tierd bash completion"
    );
}
