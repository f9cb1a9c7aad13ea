// One AdminClient login over SASL_SSL: "OK login" and the broker count, or "AUTH_FAILED
// <message>" when the broker refused the credentials.
// Usage: SecurityLogin BOOTSTRAP CA_PEM MECHANISM USER PASSWORD
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.errors.SaslAuthenticationException;

public final class SecurityLogin {
    public static void main(String[] args) throws Exception {
        try (Admin admin = Admin.create(SecurityScenario.sasl(args[0], args[1], args[2], args[3], args[4]))) {
            int nodes = admin.describeCluster().nodes().get().size();
            Check.out("OK login nodes=" + nodes);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof SaslAuthenticationException) {
                Check.out("AUTH_FAILED " + e.getCause().getMessage());
                return;
            }
            throw e;
        }
    }
}
