//! Man pages and shell completions for tierd's programs (`tierd`,
//! `tierctl`), generated from their clap definitions so they never drift
//! from `--help`. Each program exposes them as `PROGRAM man [--out DIR]`
//! and `PROGRAM completions SHELL`; docs/operations.md says where to
//! install them.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// Write the man page of `cmd` (section 1) to `out`.
pub fn man_page(cmd: &clap::Command, out: &mut dyn Write) -> io::Result<()> {
    clap_mangen::Man::new(cmd.clone()).render(out)
}

/// Write `cmd`'s page and one per subcommand (`tierctl-status.1`, and
/// `tierctl-config-set.1` for nested ones) into `dir`; returns the files.
pub fn man_pages(cmd: &clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.clone();
    cmd.build();
    let mut files = Vec::new();
    write_pages(&cmd, cmd.get_name(), dir, &mut files)?;
    Ok(files)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    files: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let page = cmd.clone().name(name.to_string());
    let path = dir.join(format!("{name}.1"));
    let mut f = std::fs::File::create(&path)?;
    clap_mangen::Man::new(page).render(&mut f)?;
    files.push(path);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, files)?;
    }
    Ok(())
}

/// Write the completion script of `cmd` for `shell` to `out`.
pub fn completions(cmd: &clap::Command, shell: Shell, out: &mut dyn Write) {
    let mut cmd = cmd.clone();
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, out);
}
