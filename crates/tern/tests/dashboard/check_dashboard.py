"""Opens an admin endpoint's /dashboard in headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium) while load runs, and checks what a person watching it would: the page loads without a console error,
every element named with --expect appears, and the numbers named with --moving change while the load runs (each
read once a second for --seconds). Prints one JSON line of what it read; exits 1 with the reason if a check fails.

Usage: python3 check_dashboard.py URL [--expect ID]... [--moving ID]... [--seconds N] [--screenshot PNG]
"""
import argparse
import json
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def browser():
    options = webdriver.ChromeOptions()
    # Debian's paths, given so that Selenium never tries to download a browser or a driver.
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def text_of(driver, element_id):
    try:
        return driver.find_element(By.ID, element_id).text
    except NoSuchElementException:
        return None


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
