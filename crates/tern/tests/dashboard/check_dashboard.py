"""Opens an admin endpoint's /dashboard in headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium) while load runs, and checks what a person watching it would: the page loads without a console error,
every element named with --expect appears, the numbers named with --moving change while the load runs (each
read once a second for --seconds), and no figure is ever negative. Prints one JSON line of what it read; exits 1 with the reason if a check fails.

Usage: python3 check_dashboard.py URL [--expect ID]... [--moving ID]... [--seconds N] [--screenshot PNG]
"""
import argparse
import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def browser():
    options = webdriver.ChromeOptions()
    # Debian's paths, given so that Selenium never tries to download a browser or a driver.
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def text_of(driver, element_id):
    # Read in one script call: the page redraws its panels every second, so an element found by one call
    # may be gone by the next.
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.textContent : null;", element_id)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--moving", action="append", default=[])
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--screenshot")
    args = parser.parse_args()

    driver = browser()
    failures = []
    readings = {element_id: [] for element_id in args.moving}
    try:
        driver.get(args.url)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(1)
            for element_id in args.moving:
                readings[element_id].append(text_of(driver, element_id))
            # No figure is ever negative, counters reset (`stats reset`) or not.
            figures = driver.execute_script(
                "return [...document.querySelectorAll('.figure .value')].map(e => e.id + '=' + e.textContent);")
            negative = [f for f in figures if f.split("=", 1)[1].startswith("-")]
            if negative:
                failures.append(f"negative figures: {negative}")
        status = text_of(driver, "status")
        if not status or not status.startswith("updated"):
            failures.append(f"the status line says {status!r}, not that it updated")
        for element_id in args.expect:
            if text_of(driver, element_id) is None:
                failures.append(f"no element #{element_id}")
        for element_id, values in readings.items():
            seen = [v for v in values if v not in (None, "", "–")]
            if len(set(seen)) < 2:
                failures.append(f"#{element_id} did not move while load ran: {values}")
        if args.screenshot:
            # The whole page, not the first screenful: as tall as its content, then one more refresh.
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1400, min(max(height + 140, 1000), 3000))
            time.sleep(1.5)
            driver.save_screenshot(args.screenshot)
        # Everything the page logged: a script error, a failed fetch, a policy violation.
        console = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
        for entry in console:
            failures.append(f"console {entry['level']}: {entry['message']}")
        print(json.dumps({"status": status, "readings": readings, "console": console}))
    finally:
        driver.quit()
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
