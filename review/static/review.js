// Small progressive enhancements; every page works without JavaScript.
document.addEventListener("DOMContentLoaded", () => {
  // "Label saved." is shown once: drop ?labeled= so a reload does not show it again.
  const url = new URL(location.href);
  if (url.searchParams.has("labeled")) {
    url.searchParams.delete("labeled");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  // A second click while a form posts would append a duplicate label row: disable the button.
  document.querySelectorAll("form").forEach((form) => {
    form.addEventListener("submit", () => {
      const button = form.querySelector("button[type=submit]");
      if (button) { setTimeout(() => { button.disabled = true; }, 0); }
    });
  });
});
