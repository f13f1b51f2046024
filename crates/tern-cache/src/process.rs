//! What memcached does to its own process at start, on request: the core file limit (`-r`), memory
//! locking (`-k`), and the check that transparent huge pages exist before `-L` uses them; with memcached's
//! words and outcomes.

/// `-r`: the core file limit raised to unlimited, else to the hard limit; no core file possible at all
/// stops the start (memcached exits with `EX_OSERR`).
pub fn enable_coredumps() -> anyhow::Result<()> {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with valid pointers to rlimit values.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0
            && libc::setrlimit(libc::RLIMIT_CORE, &unlimited) != 0
        {
            let hard = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &hard);
        }
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) != 0 || limit.rlim_cur == 0 {
            eprintln!("failed to ensure corefile creation");
            std::process::exit(71);
        }
    }
    Ok(())
}

/// `-k`: every page of the process, now and to come, locked in memory; a refusal (RLIMIT_MEMLOCK, no
/// privilege) is a warning and the server goes on, as memcached does.
pub fn lock_memory() {
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        eprintln!(
            "warning: -k invalid, mlockall() failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// `-L`: whether the kernel has transparent huge pages on (`always` or `madvise`), read where memcached
/// reads it; `Err` holds memcached's words for why not.
pub fn check_huge_pages() -> Result<(), String> {
    const PATHS: [&str; 2] = [
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/kernel/mm/redhat_transparent_hugepage/enabled",
    ];
    let Some(setting) = PATHS.iter().find_map(|p| std::fs::read_to_string(p).ok()) else {
        return Err(
            "Transparent huge pages support not detected.\nWill use default page size.".into(),
        );
    };
    if setting.is_empty() {
        return Err(
            "Transparent huge pages could not read the configuration.\nWill use default page size."
                .into(),
        );
    }
    if setting.contains("[never]") {
        return Err("Transparent huge pages support disabled.\nWill use default page size.".into());
    }
    Ok(())
}
