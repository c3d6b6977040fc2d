// Progressive enhancement of the status page: every page works without this script.
// It listens to the page's event stream and re-reads the page when a step changes,
// swapping the live part (#live) and leaving the operator's half-filled forms alone,
// and it ticks the countdowns to not_before.
(function () {
  "use strict";
  var status = null;
  var pending = null;

  function say(text) {
    if (!status) { return; }
    status.hidden = false;
    status.textContent = text;
  }

  function formsInUse() {
    var fields = document.querySelectorAll("form.action input[name=reason]");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value || fields[i] === document.activeElement) { return true; }
    }
    return false;
  }

  function refresh() {
    pending = null;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var page = new DOMParser().parseFromString(html, "text/html");
        var live = document.getElementById("live");
        var fresh = page.getElementById("live");
        if (!live || !fresh) { return; }
        var moved = live.getAttribute("data-state") !== fresh.getAttribute("data-state");
        var actions = document.getElementById("actions");
        var freshActions = page.getElementById("actions");
        if (moved && actions && freshActions && !formsInUse()) {
          actions.replaceWith(document.importNode(freshActions, true));
        }
        live.replaceWith(document.importNode(fresh, true));
        tick();
        say("updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("update failed; reload the page"); });
  }

  function soon() {
    if (pending === null) { pending = window.setTimeout(refresh, 250); }
  }

  function listen(url) {
    if (!window.EventSource) { return; }
    var source = new EventSource(url);
    source.onopen = function () { say("live"); };
    source.onmessage = soon;
    ["changed", "submitted", "claimed", "executed", "looked_up", "lease_expired", "approved",
     "rejected", "cancelled", "resolved", "input_provided", "noop"].forEach(function (kind) {
      source.addEventListener(kind, soon);
    });
    source.addEventListener("end", function () { soon(); source.close(); say("final state"); });
    source.onerror = function () { say("reconnecting…"); };
  }

  function tick() {
    var now = Date.now();
    var items = document.querySelectorAll(".countdown[data-due]");
    for (var i = 0; i < items.length; i++) {
      var left = Math.round((Date.parse(items[i].getAttribute("data-due")) - now) / 1000);
      if (left <= 0) { items[i].textContent = "due now"; continue; }
      var m = Math.floor(left / 60), s = left % 60, h = Math.floor(m / 60);
      items[i].textContent = h ? "in " + h + "h " + ("0" + (m % 60)).slice(-2) + "m"
        : m ? "in " + m + "m " + ("0" + s).slice(-2) + "s" : "in " + s + "s";
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    status = document.getElementById("live-status");
    var url = document.body.getAttribute("data-live");
    if (url) { listen(url); }
    tick();
    window.setInterval(tick, 1000);
  });
})();
