//! The demo as a table of scenes: each says what it shows and which routes it
//! calls, then acts on a stage that earlier scenes have set. `play` numbers
//! and heads the scenes, so a script is its table, not a long function.

use anyhow::Result;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

/// One scene's act: runs against the stage, printing what it sees.
pub(crate) type Act<S> = for<'a> fn(&'a mut S) -> BoxFuture<'a, Result<()>>;

/// One numbered scene of a script.
pub(crate) struct Scene<S> {
    /// The heading: what the scene shows. `{kb}` names the stage's knowledge base.
    pub say: &'static str,
    /// The routes (or parts) it goes through, under the heading.
    pub route: &'static str,
    pub act: Act<S>,
}

/// What a script's headings may name from its stage.
pub(crate) trait Stage {
    /// The knowledge base the scenes work on, once there is one; a scene
    /// whose heading names `{kb}` is left out while there is none.
    fn kb(&self) -> Option<String>;
}

/// Plays the scenes in order, numbering those it shows from 1.
pub(crate) async fn play<S: Stage>(stage: &mut S, scenes: &[Scene<S>]) -> Result<()> {
    let mut n = 0;
    for scene in scenes {
        let names_kb = scene.say.contains("{kb}") || scene.route.contains("{kb}");
        let kb = stage.kb();
        let (say, route) = match (&kb, names_kb) {
            (None, true) => continue,
            (Some(kb), true) => (
                scene.say.replace("{kb}", kb),
                scene.route.replace("{kb}", kb),
            ),
            (_, false) => (scene.say.to_owned(), scene.route.to_owned()),
        };
        n += 1;
        heading(n, &say, &route);
        (scene.act)(stage).await?;
    }
    Ok(())
}

fn heading(n: u32, say: &str, route: &str) {
    println!();
    println!("{n}. {say}");
    println!("   {route}");
}

/// Seconds since `since`, as the timelines print them.
pub(crate) fn stamp(since: Instant) -> String {
    format!("[{:5.2} s]", since.elapsed().as_secs_f64())
}

/// `text` on one line, cut at `max` characters.
pub(crate) fn short(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    /// A stage that records which scenes acted.
    struct Log {
        kb: Option<String>,
        acted: Vec<&'static str>,
    }

    impl Stage for Log {
        fn kb(&self) -> Option<String> {
            self.kb.clone()
        }
    }

    fn first(log: &mut Log) -> BoxFuture<'_, Result<()>> {
        async move {
            log.acted.push("first");
            Ok(())
        }
        .boxed()
    }

    fn of_kb(log: &mut Log) -> BoxFuture<'_, Result<()>> {
        async move {
            log.acted.push("of_kb");
            Ok(())
        }
        .boxed()
    }

    fn fails(_: &mut Log) -> BoxFuture<'_, Result<()>> {
        async move { anyhow::bail!("the platform said no") }.boxed()
    }

    const SCENES: &[Scene<Log>] = &[
        Scene {
            say: "First",
            route: "GET /",
            act: first,
        },
        Scene {
            say: "Documents of {kb}",
            route: "GET /kbs/{kb}",
            act: of_kb,
        },
        Scene {
            say: "Fails",
            route: "GET /x",
            act: fails,
        },
    ];

    #[tokio::test]
    async fn scenes_play_in_order_and_a_failure_ends_the_script() {
        let mut log = Log {
            kb: Some("kb-1".into()),
            acted: Vec::new(),
        };
        let played = play(&mut log, SCENES).await;
        assert_eq!(played.unwrap_err().to_string(), "the platform said no");
        assert_eq!(log.acted, ["first", "of_kb"]);
    }

    #[tokio::test]
    async fn a_scene_naming_the_kb_is_left_out_without_one() {
        let mut log = Log {
            kb: None,
            acted: Vec::new(),
        };
        let _ = play(&mut log, &SCENES[..2]).await;
        assert_eq!(log.acted, ["first"]);
    }

    #[test]
    fn short_cuts_at_max_characters_on_one_line() {
        assert_eq!(short("a  b\nc", 10), "a b c");
        assert_eq!(short("Prüfbericht", 4), "Prüf…");
    }
}
