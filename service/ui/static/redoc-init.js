// Starts ReDoc on /redoc from the bundled script (no inline script: see service/ui/docs.py for its CSP).
"use strict";
(function () {
  const root = document.getElementById("redoc");
  Redoc.init(root.getAttribute("data-url"), {}, root);
})();
