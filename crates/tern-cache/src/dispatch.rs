//! Which door answers a command: the text, meta, stats and dump modules each answer their own commands, and
//! the commands that act on the server itself (`version`, `verbosity`, `quit`, `shutdown`,
//! `cache_memlimit`...) are answered here. Shared by TCP (with the server's controls) and UDP.

use tern_memcache_proto::reply::{self, ErrorReply, Status};
use tern_memcache_proto::request::ShutdownMode;
use tern_memcache_proto::{Request, Words};
use tern_runtime::ServerControl;

use crate::cache::{Answer, Cache, CacheLoop, Flow, MEMCACHED_VERSION};

impl Cache {
    /// Runs one command and writes its reply, always: when memcached would send nothing (`noreply`), the
    /// returned [`Answer::hidden`] says so and the caller drops the reply (after logging it for `-vv`, as
    /// memcached's `NOREPLY` lines). `log` collects the `-vv` lines a get writes itself (`sending key`,
    /// `END`).
    pub(crate) fn execute(
        &self,
        request: Request<'_>,
        now: u32,
        out: &mut Vec<u8>,
        control: Option<&ServerControl>,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
    ) -> Answer {
        let mut log = log;
        let request = match self.execute_text(request, now, out, lp, log.as_deref_mut()) {
            Ok(answer) => return answer,
            Err(other) => other,
        };
        match request {
            // Over TCP, `answer_tcp` answers gets itself (streamed, see `get_tcp`).
            Request::Get {
                kind,
                exptime,
                keys,
            } => self.get(kind, exptime, keys, now, out, None, lp, log),
            Request::MetaGet { key, flags } => self.meta_get(key, &flags, now, out, lp),
            Request::MetaSet { key, flags, data } => {
                self.meta_set(key, &flags, data, now, out, log, lp)
            }
            Request::MetaDelete { key, flags } => self.meta_delete(key, &flags, now, out, lp),
            Request::MetaArithmetic { key, flags } => {
                self.meta_arithmetic(key, &flags, now, out, lp)
            }
            Request::MetaNoop => reply::write_status(out, Status::MetaNoop),
            Request::MetaDebug { key } => self.meta_debug(key, now, out),
            Request::Stats { args } => self.stats(args, now, out, control, lp.log_id.get() as u64),
            Request::LruCrawler(cmd) => self.lru_crawler(cmd, now, out),
            Request::Admin { command, args } => return self.admin(command, args, out),
            Request::Error(error) => reply::write_error(out, error),
            request => return self.execute_control(request, now, out, control),
        }
        Answer::shown()
    }

    /// The commands that act on the server rather than on items.
    fn execute_control(
        &self,
        request: Request<'_>,
        now: u32,
        out: &mut Vec<u8>,
        control: Option<&ServerControl>,
    ) -> Answer {
        let (flow, hidden) = match request {
            Request::Version => {
                reply::write_version(out, MEMCACHED_VERSION.as_bytes());
                (Flow::Continue, false)
            }
            Request::Verbosity { level, noreply } => {
                self.vlog.set_level(level);
                reply::write_status(out, Status::Ok);
                (Flow::Continue, noreply)
            }
            Request::Quit => (Flow::Close, false),
            Request::Hangup => (Flow::Hangup, false),
            Request::Shutdown(mode) => match (self.settings.shutdown_enabled, control) {
                (false, _) | (true, None) => {
                    reply::write_error(out, ErrorReply::ShutdownNotEnabled);
                    (Flow::Continue, false)
                }
                (true, Some(_)) if mode == ShutdownMode::Invalid => {
                    reply::write_error(out, ErrorReply::InvalidShutdownMode);
                    (Flow::Continue, false)
                }
                (true, Some(control)) => {
                    if mode == ShutdownMode::Graceful {
                        self.graceful_stop
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    control.shutdown();
                    (Flow::Close, false)
                }
            },
            Request::CacheMemlimit { megabytes, noreply } => {
                let reply: &[u8] = match megabytes {
                    None => b"ERROR\r\n",
                    Some(mb) if mb < 8 => {
                        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
                    }
                    Some(mb) => {
                        self.store.set_memory_limit((mb as usize) << 20, now);
                        b"OK\r\n"
                    }
                };
                out.extend_from_slice(reply);
                (Flow::Continue, noreply)
            }
            Request::Silent(error) => {
                // Written only for the `-vv` log (`>NN NOREPLY ...`), then dropped like any hidden reply.
                reply::write_error(out, error);
                (Flow::Continue, true)
            }
            other => unreachable!("{other:?} is answered by its door (execute)"),
        };
        Answer { flow, hidden }
    }

    fn admin(&self, command: &[u8], args: Words<'_>, out: &mut Vec<u8>) -> Answer {
        let args: Vec<&[u8]> = args.collect();
        if let (b"refresh_certs", Some(tls)) = (command, &self.tls) {
            // memcached: `OK` (hidden by noreply), or why the files could not be loaded (always shown).
            return match tls.reload() {
                Ok(()) => {
                    reply::write_status(out, Status::Ok);
                    Answer {
                        flow: Flow::Continue,
                        hidden: args.last() == Some(&&b"noreply"[..]),
                    }
                }
                Err(e) => {
                    out.extend_from_slice(format!("{e}\r\n").as_bytes());
                    Answer::shown()
                }
            };
        }
        if let Some(reply) = crate::admin::answer(command, &args) {
            out.extend_from_slice(reply);
        }
        Answer::shown()
    }
}
