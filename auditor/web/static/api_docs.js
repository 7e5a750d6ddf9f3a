/* The API docs page: Swagger UI (served from this site) on the API's own OpenAPI document. */
(function () {
  "use strict";
  function init() {
    var el = document.getElementById("swagger-ui");
    if (!el || typeof SwaggerUIBundle === "undefined") return;
    SwaggerUIBundle({
      url: el.getAttribute("data-spec-url"), domNode: el, deepLinking: false, validatorUrl: null,
      docExpansion: "list", defaultModelsExpandDepth: 0, tryItOutEnabled: false,
      onComplete: function () { el.setAttribute("data-ready", "true"); },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
