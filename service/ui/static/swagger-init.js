// Starts Swagger UI on /docs from the bundled script (no inline script: the page has the console's CSP).
"use strict";
window.addEventListener("load", function () {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
    layout: "BaseLayout",
    showExtensions: true,
    showCommonExtensions: true,
  });
});
