/*
 * Iceberg's own REST catalog test server, as packaged in the apache/iceberg-rest-fixture image
 * (RESTCatalogAdapter + RESTCatalogServlet over a JDBC catalog, configured from CATALOG_* variables),
 * with two differences the tests need: it listens on 127.0.0.1 only, and it requires an OAuth2
 * client credential (client_credentials grant) and the bearer token it issued on every other call.
 *
 * Run by tests/cluster/conftest.py as `java -cp <jars> LoopbackRestCatalog.java` (single-file source).
 * Environment:
 *   REST_PORT                        port to listen on (127.0.0.1)
 *   REST_CLIENT_ID, REST_CLIENT_SECRET  the only accepted client credential
 *   CATALOG_<KEY>                    backend catalog properties, named as the fixture names them:
 *                                    `__` becomes `-`, `_` becomes `.`, lower case
 *                                    (CATALOG_IO__IMPL -> io-impl, CATALOG_S3_ENDPOINT -> s3.endpoint)
 *   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION  the server's own S3 access (S3FileIO)
 */

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.HTTPHeaders;
import org.apache.iceberg.rest.HTTPRequest;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.apache.iceberg.rest.RESTResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.rest.responses.OAuthTokenResponse;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class LoopbackRestCatalog {

  /** The fixture's adapter, behind a client-credential check and a bearer-token check. */
  static final class CredentialCheckingAdapter extends RESTCatalogAdapter {
    private final String clientId;
    private final String clientSecret;
    private final Set<String> issuedTokens = ConcurrentHashMap.newKeySet();

    CredentialCheckingAdapter(Catalog catalog, String clientId, String clientSecret) {
      super(catalog);
      this.clientId = clientId;
      this.clientSecret = clientSecret;
    }

    @Override
    protected <T extends RESTResponse> T execute(
        HTTPRequest request,
        Class<T> responseType,
        Consumer<ErrorResponse> errorHandler,
        Consumer<Map<String, String>> responseHeaders) {
      if (request.path().endsWith("oauth/tokens")) {
        @SuppressWarnings("unchecked")
        Map<String, String> form = (Map<String, String>) request.body();
        if (!"client_credentials".equals(form.get("grant_type"))
            || !clientId.equals(form.get("client_id"))
            || !clientSecret.equals(form.get("client_secret"))) {
          errorHandler.accept(unauthorized("invalid client credential"));
          return null;
        }
        String token = UUID.randomUUID().toString();
        issuedTokens.add(token);
        OAuthTokenResponse response =
            OAuthTokenResponse.builder()
                .withToken(token)
                .withTokenType("bearer")
                .withIssuedTokenType("urn:ietf:params:oauth:token-type:access_token")
                .setExpirationInSeconds(3600)
                .build();
        return castResponse(responseType, response);
      }
      String authorization = header(request.headers(), "Authorization");
      String token = authorization == null ? null : authorization.replaceFirst("(?i)^bearer\\s+", "");
      if (token == null || !issuedTokens.contains(token)) {
        errorHandler.accept(unauthorized("missing or unknown bearer token"));
        return null;
      }
      return super.execute(request, responseType, errorHandler, responseHeaders);
    }

    private static String header(HTTPHeaders headers, String name) {
      return headers.entries().stream()
          .filter(entry -> entry.name().equalsIgnoreCase(name))
          .map(HTTPHeaders.HTTPHeader::value)
          .findFirst()
          .orElse(null);
    }

    private static ErrorResponse unauthorized(String message) {
      return ErrorResponse.builder()
          .responseCode(401)
          .withType("NotAuthorizedException")
          .withMessage(message)
          .build();
    }
  }

  private static String required(String name) {
    String value = System.getenv(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("Environment variable " + name + " is required");
    }
    return value;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> properties = new HashMap<>();
    System.getenv().forEach((name, value) -> {
      if (name.startsWith("CATALOG_")) {
        String key = name.substring("CATALOG_".length()).replace("__", "-").replace("_", ".");
        properties.put(key.toLowerCase(Locale.ROOT), value);
      }
    });
    properties.putIfAbsent("catalog-impl", JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", properties, null);

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    RESTCatalogAdapter adapter =
        new CredentialCheckingAdapter(catalog, required("REST_CLIENT_ID"), required("REST_CLIENT_SECRET"));
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(Integer.parseInt(required("REST_PORT")));
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("iceberg-rest: listening on http://127.0.0.1:" + connector.getLocalPort());
    server.join();
  }
}
